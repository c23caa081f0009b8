#pragma once
// The optional Prometheus endpoint: serves the daemon's Telemetry at /metrics
// through prometheus-cpp's Exposer (civetweb, on its own threads). Off unless
// configured; loopback unless a non-loopback address is explicitly allowed.

#include <memory>
#include <string>
#include <string_view>

#include "agent/telemetry/telemetry.hpp"
#include "policy/error.hpp"

namespace prometheus {
class Exposer;
}

namespace kvtier::agent {

inline constexpr std::string_view kDefaultPrometheusListen = "127.0.0.1:9464";

struct PrometheusOptions {
  // "IPV4:PORT" or "[IPV6]:PORT", numeric. Port 0 picks a free port.
  std::string listen = std::string(kDefaultPrometheusListen);
  bool allow_non_loopback = false;
};

struct ListenAddress {
  std::string host;
  int port = 0;
  bool loopback = false;
};

// Parses and classifies a listen address; the error names the address and
// the accepted forms.
Result<ListenAddress> parse_listen_address(std::string_view listen);

// The refusal of a non-loopback address, naming the config key that set it
// (no key allows one: allow_non_loopback is for tests and embedders).
std::string non_loopback_error(const std::string& listen);

class PrometheusExporter {
 public:
  // `telemetry` must outlive the exporter. Starts the server threads: call it
  // after the daemon has blocked its signals.
  static Result<std::unique_ptr<PrometheusExporter>> start(const Telemetry& telemetry,
                                                           const PrometheusOptions& opts);
  ~PrometheusExporter();
  PrometheusExporter(const PrometheusExporter&) = delete;
  PrometheusExporter& operator=(const PrometheusExporter&) = delete;

  // The port actually bound (useful with port 0).
  [[nodiscard]] int port() const { return port_; }
  [[nodiscard]] const std::string& listen() const { return listen_; }

 private:
  PrometheusExporter() = default;
  class Collector;
  std::shared_ptr<Collector> collector_;
  std::unique_ptr<prometheus::Exposer> exposer_;
  int port_ = 0;
  std::string listen_;
};

}  // namespace kvtier::agent
