#pragma once
// The part of kvtier's configuration the daemon shell itself uses. The full
// config (policy/config.hpp) is loaded elsewhere and copied into this struct,
// so the shell does not depend on the config schema.

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <string>

#include "policy/error.hpp"

namespace kvtier::agent {

struct DaemonSettings {
  std::filesystem::path socket_path = "/run/kvtier/kvtierd.sock";
  std::uint32_t socket_mode = 0660;
  std::string socket_owner;  // user name; empty: kvtierd's own user
  std::string socket_group;  // group name; empty: kvtierd's own group
  bool prometheus_enabled = false;
  std::string prometheus_listen = "127.0.0.1:9464";
  bool prometheus_allow_non_loopback = false;
  std::chrono::milliseconds interval{1000};
  // The fast promotion tick between steps; 0: off.
  std::chrono::milliseconds promote_interval{0};
  // How soon after the first touch of memory kvtier demoted the promotion tick
  // runs (gathering the touches that follow it); 0: it waits for its interval.
  std::chrono::milliseconds promote_wake{0};
  // How long the promotion tick may wait for a CPU nothing else wants (it runs
  // at SCHED_IDLE, idle_yield.hpp) before it runs at kvtierd's own priority;
  // 0: it runs at once.
  std::chrono::milliseconds promote_yield{0};
  std::string log_level = "info";

  friend bool operator==(const DaemonSettings&, const DaemonSettings&) = default;
};

// Everything wrong with `s`, one problem a line (socket mode, interval, log
// level, Prometheus address and the loopback rule).
Result<void> validate_settings(const DaemonSettings& s);

}  // namespace kvtier::agent
