#include "agent/daemon/prometheus_exporter.hpp"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <prometheus/collectable.h>
#include <prometheus/exposer.h>
#include <prometheus/metric_family.h>
#include <spdlog/spdlog.h>

#include <charconv>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <limits>
#include <memory>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include "agent/telemetry/telemetry.hpp"
#include "policy/error.hpp"

namespace kvtier::agent {

// Converts the Telemetry snapshot at every scrape, so there is one set of
// numbers, never two registries drifting apart.
class PrometheusExporter::Collector : public prometheus::Collectable {
 public:
  explicit Collector(const Telemetry& t) : telemetry_(t) {}

  [[nodiscard]] std::vector<prometheus::MetricFamily> Collect() const override {
    std::vector<prometheus::MetricFamily> out;
    for (const auto& f : telemetry_.snapshot()) {
      prometheus::MetricFamily mf{.name = f.name, .help = f.help};
      switch (f.kind) {
        case MetricKind::kCounter:
          mf.type = prometheus::MetricType::Counter;
          break;
        case MetricKind::kGauge:
          mf.type = prometheus::MetricType::Gauge;
          break;
        case MetricKind::kHistogram:
          mf.type = prometheus::MetricType::Histogram;
          break;
      }
      for (const auto& s : f.series) {
        prometheus::ClientMetric m;
        for (const auto& [k, v] : s.labels) m.label.push_back({.name = k, .value = v});
        m.counter.value = s.value;
        m.gauge.value = s.value;
        if (f.kind == MetricKind::kHistogram) {
          m.histogram.sample_count = s.histogram.count;
          m.histogram.sample_sum = s.histogram.sum;
          std::uint64_t cumulative = 0;
          for (std::size_t i = 0; i < s.histogram.buckets.size(); ++i) {
            cumulative += s.histogram.buckets[i];
            m.histogram.bucket.push_back(
                {.cumulative_count = cumulative,
                 .upper_bound = i < s.histogram.bounds.size()
                                    ? s.histogram.bounds[i]
                                    : std::numeric_limits<double>::infinity()});
          }
        }
        mf.metric.push_back(std::move(m));
      }
      out.push_back(std::move(mf));
    }
    return out;
  }

 private:
  const Telemetry& telemetry_;
};

Result<ListenAddress> parse_listen_address(std::string_view listen) {
  const auto bad = [&](std::string_view why) {
    return fail(
        fmt::format("prometheus listen address \"{}\": {} (use IPV4:PORT or [IPV6]:PORT, e.g. {})",
                    listen, why, kDefaultPrometheusListen));
  };
  ListenAddress out;
  std::string_view port_text;
  if (listen.starts_with('[')) {
    const auto close = listen.find(']');
    if (close == std::string_view::npos || close + 1 >= listen.size() || listen[close + 1] != ':') {
      return bad("unterminated IPv6 address or no port");
    }
    out.host = std::string(listen.substr(1, close - 1));
    port_text = listen.substr(close + 2);
    in6_addr a6{};
    if (inet_pton(AF_INET6, out.host.c_str(), &a6) != 1) return bad("not a numeric IPv6 address");
    out.loopback = IN6_IS_ADDR_LOOPBACK(&a6);
  } else {
    const auto colon = listen.rfind(':');
    if (colon == std::string_view::npos) return bad("no port");
    out.host = std::string(listen.substr(0, colon));
    port_text = listen.substr(colon + 1);
    in_addr a4{};
    if (inet_pton(AF_INET, out.host.c_str(), &a4) != 1) return bad("not a numeric IPv4 address");
    out.loopback = (ntohl(a4.s_addr) >> 24) == 127;
  }
  const char* first = port_text.data();
  const char* end = first + port_text.size();
  auto [ptr, ec] = std::from_chars(first, end, out.port);
  if (port_text.empty() || ec != std::errc() || ptr != end || out.port < 0 || out.port > 65535) {
    return bad("port must be a number from 0 to 65535");
  }
  return out;
}

std::string non_loopback_error(const std::string& listen) {
  return fmt::format(
      "[telemetry] prometheus_listen = \"{}\" is not a loopback address: metrics name processes "
      "and memory layout; use 127.0.0.1:PORT or [::1]:PORT, or set [telemetry] "
      "prometheus_allow_non_loopback = true to serve them there on purpose (a pod's address)",
      listen);
}

Result<std::unique_ptr<PrometheusExporter>> PrometheusExporter::start(
    const Telemetry& telemetry, const PrometheusOptions& opts) {
  auto addr = parse_listen_address(opts.listen);
  if (!addr) return std::unexpected(addr.error());
  if (!addr->loopback) {
    if (!opts.allow_non_loopback) {
      return fail(non_loopback_error(opts.listen));
    }
    spdlog::warn(
        "prometheus endpoint on non-loopback address {}: anyone who can reach it reads "
        "kvtier's metrics",
        opts.listen);
  }
  std::unique_ptr<PrometheusExporter> ex(new PrometheusExporter());
  ex->listen_ = opts.listen;
  ex->collector_ = std::make_shared<Collector>(telemetry);
  try {
    // One worker: scrapes are rare and small.
    ex->exposer_ = std::make_unique<prometheus::Exposer>(opts.listen, 1);
  } catch (const std::exception& e) {
    return fail(fmt::format("cannot listen for prometheus on {}: {} (address in use?)", opts.listen,
                            e.what()));
  }
  ex->exposer_->RegisterCollectable(ex->collector_);
  const auto ports = ex->exposer_->GetListeningPorts();
  ex->port_ = ports.empty() ? addr->port : ports.front();
  spdlog::info("prometheus metrics on http://{}:{}/metrics",
               addr->host.find(':') != std::string::npos ? "[" + addr->host + "]" : addr->host,
               ex->port_);
  return ex;
}

PrometheusExporter::~PrometheusExporter() {
  // Stop the server threads before the collector they call goes away.
  exposer_.reset();
}

}  // namespace kvtier::agent
