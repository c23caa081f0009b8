#pragma once
// kvtierd's shell around the control loop: the event loop, signals (SIGHUP
// reload, SIGTERM/SIGINT stop), the control socket and its commands, the
// telemetry registry and its Prometheus endpoint, and the systemd protocol.
// The loop's work (sources -> planner -> mover) and the config reload are
// plugged in through DaemonHooks, so tests drive the shell with fakes.

#include <chrono>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "agent/daemon/control_server.hpp"
#include "agent/daemon/daemon_settings.hpp"
#include "agent/daemon/event_loop.hpp"
#include "agent/daemon/idle_yield.hpp"
#include "agent/daemon/prometheus_exporter.hpp"
#include "agent/daemon/sd_notify.hpp"
#include "agent/host/clock.hpp"
#include "agent/telemetry/telemetry.hpp"
#include "policy/error.hpp"
#include "policy/types.hpp"

namespace kvtier::agent {

struct DaemonHooks {
  // One control-loop iteration at `now` (CLOCK_MONOTONIC); `paused`: paused by
  // an operator, observe (collect heat, plan) but move nothing. An error is
  // logged (once per distinct message) and counted; the loop goes on at the
  // next interval.
  std::function<Result<void>(TimeNs now, bool paused, Telemetry&)> step;
  // Between steps, every DaemonSettings::promote_interval (when set): promote
  // what was accessed on a slow node. Optional.
  std::function<Result<void>(TimeNs now, Telemetry&)> promote;
  // A file descriptor that turns readable when memory kvtier demoted is touched
  // (the faults source's return watch), or -1: the promotion tick then runs
  // DaemonSettings::promote_wake after it, not at its next interval. Asked
  // after start, every step and every reload (sources may restart). Optional.
  std::function<int()> wake_fd;
  // SIGHUP: re-read the configuration and return the daemon's part of it.
  // Return the errors (one per line) to keep the running configuration; the
  // hook must then leave its own state untouched too.
  std::function<Result<DaemonSettings>()> reload;
  // What `status` (full = false) and `dump` (full = true) show about the loop:
  // targets, sources, the last plan.
  std::function<nlohmann::json(bool full)> describe;
  // A few words for systemd's STATUS= line, e.g. "2 targets, source pmu".
  std::function<std::string()> summary;
  // Releases what the loop set up (BPF detached, DAMON contexts turned off).
  // Runs once, when run() ends.
  std::function<void()> shutdown;
};

class Daemon {
 public:
  static Result<std::unique_ptr<Daemon>> create(DaemonSettings settings, DaemonHooks hooks);
  ~Daemon();
  Daemon(const Daemon&) = delete;
  Daemon& operator=(const Daemon&) = delete;

  // Extra control commands (sources, targets, explain, ...). Registered
  // before start() or after; either way they reach the socket.
  void register_command(const std::string& name, ControlServer::Handler handler);

  // Blocks SIGHUP/SIGTERM/SIGINT (before any thread starts), opens the
  // socket, starts Prometheus if enabled, arms the step and watchdog timers
  // and tells systemd READY=1.
  Result<void> start();
  // start() if needed, then dispatches events until SIGTERM/SIGINT or
  // request_stop(); then STOPPING=1, the shutdown hook, and the socket is
  // removed. Returns the first fatal event-loop error, if any.
  Result<void> run();

  // The same paths SIGTERM and SIGHUP take.
  void request_stop();
  // True when the new settings were applied; false when they were rejected
  // and the running ones kept.
  bool reload();

  // Runs one step now (the timer does this every interval).
  void step_now();

  [[nodiscard]] bool paused() const { return paused_; }
  void set_paused(bool paused, const std::string& who);
  [[nodiscard]] const DaemonSettings& settings() const { return settings_; }
  [[nodiscard]] EventLoop& loop() { return *loop_; }
  [[nodiscard]] Telemetry& telemetry() { return telemetry_; }
  [[nodiscard]] const PrometheusExporter* prometheus() const { return exporter_.get(); }
  [[nodiscard]] std::uint64_t steps() const { return steps_; }
  [[nodiscard]] std::uint64_t reloads_rejected() const { return reloads_rejected_; }

  [[nodiscard]] nlohmann::json status_json() const;
  [[nodiscard]] nlohmann::json dump_json() const;

 private:
  Daemon(DaemonSettings settings, DaemonHooks hooks, std::unique_ptr<EventLoop> loop);
  void register_builtin_commands();
  void apply_prometheus();
  void publish_status();
  void promote_now();
  void arm_promote_timer();
  void apply_promote_yield();
  void sync_wake_fd();
  void on_wake();
  void on_signal(int signo);

  DaemonSettings settings_;
  DaemonHooks hooks_;
  std::unique_ptr<EventLoop> loop_;
  Telemetry telemetry_;
  SdNotify sd_;
  std::unique_ptr<ControlServer> server_;
  std::unique_ptr<PrometheusExporter> exporter_;
  std::unique_ptr<IdleYield> idle_yield_;  // promote_yield set (and allowed)
  std::map<std::string, ControlServer::Handler> commands_;
  std::optional<EventLoop::TimerId> step_timer_;
  std::optional<EventLoop::TimerId> promote_timer_;
  std::optional<EventLoop::TimerId> watchdog_timer_;
  std::optional<EventLoop::TimerId> wake_timer_;
  int wake_fd_ = -1;
  bool wake_pending_ = false;
  std::uint64_t wakes_ = 0;
  bool started_ = false;
  bool shut_down_ = false;
  bool paused_ = false;
  TimeNs started_at_ = 0;
  std::uint64_t steps_ = 0;
  std::uint64_t step_errors_ = 0;
  double last_step_seconds_ = 0.0;
  std::string last_step_error_;
  std::string last_status_;
  std::uint64_t reloads_ = 0;
  std::uint64_t reloads_rejected_ = 0;
  std::vector<std::string> last_reload_errors_;
  TimeNs last_reload_at_ = 0;  // 0: no reload yet
  bool last_reload_applied_ = false;
};

}  // namespace kvtier::agent
