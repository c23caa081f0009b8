#pragma once
// The daemon's side of the systemd notification protocol (sd_notify(3)):
// READY, STATUS, RELOADING, STOPPING and the watchdog keep-alive. Without
// NOTIFY_SOCKET (run by hand, in tests) every call does nothing.

#include <chrono>
#include <optional>
#include <string>
#include <string_view>

namespace kvtier::agent {

class SdNotify {
 public:
  // Reads WATCHDOG_USEC and WATCHDOG_PID once. NOTIFY_SOCKET is read by
  // sd_notify(3) at every call, so it must stay in the environment.
  SdNotify();

  [[nodiscard]] bool enabled() const { return enabled_; }
  // Each returns false when the message could not be sent (logged once).
  bool ready(std::string_view status);
  bool status(std::string_view status);
  bool reloading();
  bool stopping();
  bool watchdog();
  // How often to send WATCHDOG=1: half of WATCHDOG_USEC, so one late step
  // does not get the service killed. Empty when the watchdog is off.
  [[nodiscard]] std::optional<std::chrono::microseconds> watchdog_interval() const {
    return watchdog_interval_;
  }

 private:
  bool send(const std::string& message);

  bool enabled_ = false;
  bool warned_ = false;
  std::optional<std::chrono::microseconds> watchdog_interval_;
};

// STATUS= must be one line; newlines would end the assignment early.
std::string one_line(std::string_view text);

}  // namespace kvtier::agent
