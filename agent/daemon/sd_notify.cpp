#include "agent/daemon/sd_notify.hpp"

#include <spdlog/spdlog.h>
#include <systemd/sd-daemon.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "policy/error.hpp"

namespace kvtier::agent {

std::string one_line(std::string_view text) {
  std::string out(text);
  for (char& c : out) {
    if (c == '\n' || c == '\r') c = ' ';
  }
  return out;
}

SdNotify::SdNotify() {
  const char* sock =
      std::getenv("NOTIFY_SOCKET");  // NOLINT(concurrency-mt-unsafe): read at start-up
  enabled_ = sock != nullptr && *sock != '\0';
  std::uint64_t usec = 0;
  // 0 = do not unset the variables: a re-exec'd or forked helper may need them.
  if (sd_watchdog_enabled(0, &usec) > 0 && usec > 0) {
    watchdog_interval_ = std::chrono::microseconds(usec / 2);
  }
}

bool SdNotify::send(const std::string& message) {
  if (!enabled_) return true;
  const int rc = sd_notify(0, message.c_str());
  if (rc > 0) return true;
  if (!warned_) {
    warned_ = true;
    spdlog::warn("sd_notify to $NOTIFY_SOCKET failed: {}",
                 rc < 0 ? errno_text(-rc) : std::string("socket not set"));
  }
  return false;
}

bool SdNotify::ready(std::string_view status) {
  return send("READY=1\nSTATUS=" + one_line(status));
}

bool SdNotify::status(std::string_view status) {
  return send("STATUS=" + one_line(status));
}

bool SdNotify::reloading() {
  return send("RELOADING=1\nSTATUS=reloading configuration");
}

bool SdNotify::stopping() {
  return send("STOPPING=1\nSTATUS=stopping");
}

bool SdNotify::watchdog() {
  return send("WATCHDOG=1");
}

}  // namespace kvtier::agent
