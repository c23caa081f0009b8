#include "agent/daemon/daemon_settings.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <sys/un.h>

#include <string>
#include <vector>

#include "agent/daemon/prometheus_exporter.hpp"
#include "policy/error.hpp"

namespace kvtier::agent {

Result<void> validate_settings(const DaemonSettings& s) {
  std::vector<std::string> errors;
  if (s.socket_path.empty() || !s.socket_path.is_absolute()) {
    errors.push_back(fmt::format("socket path \"{}\" must be absolute", s.socket_path.string()));
  }
  // A unix socket address holds the path and its NUL in 108 bytes.
  constexpr std::size_t kMaxSocketPath = sizeof(sockaddr_un::sun_path) - 1;
  if (s.socket_path.native().size() > kMaxSocketPath) {
    errors.push_back(fmt::format(
        "socket path {} is {} bytes, longer than the {} a unix socket address holds (choose a "
        "shorter path)",
        s.socket_path.string(), s.socket_path.native().size(), kMaxSocketPath));
  }
  if ((s.socket_mode & ~0777U) != 0) {
    errors.push_back(fmt::format("socket mode {:o} has bits outside 0777", s.socket_mode));
  }
  if (s.interval.count() <= 0) {
    errors.push_back(fmt::format("interval {} ms must be positive", s.interval.count()));
  }
  // spdlog maps unknown names to "off", which would silence a typo'd daemon.
  if (spdlog::level::from_str(s.log_level) == spdlog::level::off && s.log_level != "off") {
    errors.push_back(
        fmt::format("log level \"{}\" is not one of trace, debug, info, warn, error, critical, off",
                    s.log_level));
  }
  if (s.prometheus_enabled) {
    auto addr = parse_listen_address(s.prometheus_listen);
    if (!addr) {
      errors.push_back(addr.error().message);
    } else if (!addr->loopback && !s.prometheus_allow_non_loopback) {
      errors.push_back(non_loopback_error(s.prometheus_listen));
    }
  }
  if (errors.empty()) return {};
  std::string msg;
  for (const auto& e : errors) msg += (msg.empty() ? "" : "\n") + e;
  return fail(msg);
}

}  // namespace kvtier::agent
