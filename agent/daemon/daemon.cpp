#include "agent/daemon/daemon.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <sys/epoll.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdint>
#include <ctime>
#include <exception>
#include <memory>
#include <sstream>
#include <string>
#include <utility>

#include "agent/daemon/control_server.hpp"
#include "agent/daemon/daemon_settings.hpp"
#include "agent/daemon/event_loop.hpp"
#include "agent/daemon/idle_yield.hpp"
#include "agent/daemon/prometheus_exporter.hpp"
#include "agent/host/clock.hpp"
#include "agent/telemetry/telemetry.hpp"
#include "policy/error.hpp"
#include "policy/types.hpp"

namespace kvtier::agent {
namespace {

constexpr std::size_t kMaxReloadErrorLines = 20;
constexpr std::size_t kMaxReloadErrorBytes = 1024;

}  // namespace

using nlohmann::json;

Result<std::unique_ptr<Daemon>> Daemon::create(DaemonSettings settings, DaemonHooks hooks) {
  if (auto ok = validate_settings(settings); !ok) return std::unexpected(ok.error());
  auto loop = EventLoop::create();
  if (!loop) return std::unexpected(loop.error());
  return std::unique_ptr<Daemon>(
      new Daemon(std::move(settings), std::move(hooks), std::move(*loop)));
}

Daemon::Daemon(DaemonSettings settings, DaemonHooks hooks, std::unique_ptr<EventLoop> loop)
    : settings_(std::move(settings)), hooks_(std::move(hooks)), loop_(std::move(loop)) {
  telemetry_.describe("kvtier_paused", MetricKind::kGauge,
                      "1 while an operator has paused page moves");
  telemetry_.describe("kvtier_reloads_total", MetricKind::kCounter,
                      "Configuration reloads, by result (applied, rejected)");
  telemetry_.describe("kvtier_config_last_reload_successful", MetricKind::kGauge,
                      "0 while the last configuration reload was rejected, else 1");
  telemetry_.set("kvtier_paused", {}, 0);
  // Both results from the start, so increase() sees the first rejection.
  telemetry_.add("kvtier_reloads_total", {{"result", "applied"}}, 0);
  telemetry_.add("kvtier_reloads_total", {{"result", "rejected"}}, 0);
  telemetry_.set("kvtier_config_last_reload_successful", {}, 1);
  register_builtin_commands();
}

Daemon::~Daemon() {
  // Order matters: Prometheus threads read telemetry_, the server uses loop_.
  exporter_.reset();
  server_.reset();
}

void Daemon::register_command(const std::string& name, ControlServer::Handler handler) {
  commands_[name] = handler;
  if (server_) server_->register_command(name, std::move(handler));
}

void Daemon::register_builtin_commands() {
  const auto who = [](const PeerCred& p) { return fmt::format("uid {} pid {}", p.uid, p.pid); };
  commands_["status"] = [this](const json&, const PeerCred&) -> Result<json> {
    return status_json();
  };
  commands_["dump"] = [this](const json&, const PeerCred&) -> Result<json> { return dump_json(); };
  commands_["pause"] = [this, who](const json&, const PeerCred& p) -> Result<json> {
    const bool changed = !paused_;
    set_paused(true, who(p));
    return json{{"paused", true}, {"changed", changed}};
  };
  commands_["resume"] = [this, who](const json&, const PeerCred& p) -> Result<json> {
    const bool changed = paused_;
    set_paused(false, who(p));
    return json{{"paused", false}, {"changed", changed}};
  };
}

void Daemon::set_paused(bool paused, const std::string& who) {
  if (paused != paused_) {
    spdlog::info("{} by {}: {}", paused ? "paused" : "resumed", who,
                 paused ? "no pages move until resume" : "pages move again");
  }
  paused_ = paused;
  telemetry_.set("kvtier_paused", {}, paused ? 1 : 0);
  publish_status();
}

Result<void> Daemon::start() {
  if (started_) return {};
  // First, before Prometheus starts its threads: they inherit the mask.
  auto sig = loop_->handle_signals({SIGHUP, SIGTERM, SIGINT}, [this](int s) { on_signal(s); });
  if (!sig) return std::unexpected(sig.error());

  auto server = ControlServer::open(*loop_, ControlSocketOptions{.path = settings_.socket_path,
                                                                 .mode = settings_.socket_mode,
                                                                 .owner = settings_.socket_owner,
                                                                 .group = settings_.socket_group});
  if (!server) return std::unexpected(server.error());
  server_ = std::move(*server);
  for (const auto& [name, handler] : commands_) server_->register_command(name, handler);

  if (settings_.prometheus_enabled) {
    auto ex = PrometheusExporter::start(
        telemetry_,
        PrometheusOptions{.listen = settings_.prometheus_listen,
                          .allow_non_loopback = settings_.prometheus_allow_non_loopback});
    if (!ex) return std::unexpected(ex.error());
    exporter_ = std::move(*ex);
  }

  auto timer =
      loop_->add_timer(std::chrono::nanoseconds(0), settings_.interval, [this] { step_now(); });
  if (!timer) return std::unexpected(timer.error());
  step_timer_ = *timer;
  arm_promote_timer();
  apply_promote_yield();
  sync_wake_fd();
  if (auto wd = sd_.watchdog_interval()) {
    auto wt = loop_->add_timer(std::chrono::nanoseconds(0), *wd, [this] { sd_.watchdog(); });
    if (!wt) return std::unexpected(wt.error());
    watchdog_timer_ = *wt;
    spdlog::debug("systemd watchdog: keep-alive every {} ms", wd->count() / 1000);
  }
  started_at_ = monotonic_now();
  started_ = true;
  std::string summary = hooks_.summary ? hooks_.summary() : std::string();
  sd_.ready(fmt::format("running{}{}", summary.empty() ? "" : ": ", summary));
  spdlog::info("kvtierd running: step every {} ms, control socket {}", settings_.interval.count(),
               settings_.socket_path.string());
  return {};
}

Result<void> Daemon::run() {
  if (auto ok = start(); !ok) return ok;
  auto result = loop_->run();
  sd_.stopping();
  spdlog::info("kvtierd stopping after {} steps", steps_);
  if (hooks_.shutdown && !shut_down_) {
    shut_down_ = true;
    try {
      hooks_.shutdown();
    } catch (const std::exception& e) {
      spdlog::error("shutdown: {}", e.what());
    }
  }
  if (step_timer_) loop_->remove_timer(*step_timer_);
  if (promote_timer_) loop_->remove_timer(*promote_timer_);
  if (watchdog_timer_) loop_->remove_timer(*watchdog_timer_);
  if (wake_timer_) loop_->remove_timer(*wake_timer_);
  if (wake_fd_ >= 0) loop_->remove_fd(wake_fd_);
  wake_fd_ = -1;
  wake_timer_.reset();
  step_timer_.reset();
  promote_timer_.reset();
  watchdog_timer_.reset();
  exporter_.reset();
  server_.reset();  // removes the socket file
  return result;
}

void Daemon::request_stop() {
  loop_->stop();
}

void Daemon::on_signal(int signo) {
  switch (signo) {
    case SIGHUP:
      spdlog::info("SIGHUP: reloading the configuration");
      reload();
      break;
    case SIGTERM:
    case SIGINT:
      spdlog::info("{}: stopping", signo == SIGTERM ? "SIGTERM" : "SIGINT");
      request_stop();
      break;
    default:
      break;
  }
}

bool Daemon::reload() {
  sd_.reloading();
  ++reloads_;
  last_reload_at_ = monotonic_now();
  Result<DaemonSettings> next = hooks_.reload ? hooks_.reload() : Result<DaemonSettings>(settings_);
  if (next) {
    if (auto ok = validate_settings(*next); !ok) next = std::unexpected(ok.error());
  }
  if (!next) {
    ++reloads_rejected_;
    last_reload_applied_ = false;
    telemetry_.add("kvtier_reloads_total", {{"result", "rejected"}});
    telemetry_.set("kvtier_config_last_reload_successful", {}, 0);
    last_reload_errors_.clear();
    std::istringstream lines(next.error().message);
    std::size_t more = 0;
    for (std::string line; std::getline(lines, line);) {
      if (line.empty()) continue;
      // Kept for every later `status` reply and logged: bounded whatever the hook returns.
      if (last_reload_errors_.size() < kMaxReloadErrorLines) {
        last_reload_errors_.push_back(line.substr(0, kMaxReloadErrorBytes));
      } else {
        ++more;
      }
    }
    const std::size_t total = last_reload_errors_.size() + more;
    if (more > 0) last_reload_errors_.push_back(fmt::format("and {} more line(s)", more));
    spdlog::error("reload rejected ({} error{}); the running configuration stays in effect", total,
                  total == 1 ? "" : "s");
    for (const auto& line : last_reload_errors_) spdlog::error("reload: {}", line);
    sd_.ready("running (last reload rejected, see the journal)");
    return false;
  }
  last_reload_errors_.clear();
  last_reload_applied_ = true;
  const DaemonSettings old = settings_;
  settings_ = *next;
  telemetry_.add("kvtier_reloads_total", {{"result", "applied"}});
  telemetry_.set("kvtier_config_last_reload_successful", {}, 1);

  if (settings_.log_level != old.log_level) {
    spdlog::set_level(spdlog::level::from_str(settings_.log_level));
  }
  if (settings_.interval != old.interval && step_timer_) {
    if (auto r = loop_->rearm_timer(*step_timer_, settings_.interval, settings_.interval); !r) {
      spdlog::error("reload: cannot change the interval: {}", r.error().message);
    }
  }
  if (settings_.promote_interval != old.promote_interval && started_) arm_promote_timer();
  if (settings_.promote_yield != old.promote_yield && started_) apply_promote_yield();
  if (started_) sync_wake_fd();
  if (settings_.prometheus_enabled != old.prometheus_enabled ||
      settings_.prometheus_listen != old.prometheus_listen ||
      settings_.prometheus_allow_non_loopback != old.prometheus_allow_non_loopback) {
    apply_prometheus();
  }
  if (settings_.socket_path != old.socket_path || settings_.socket_mode != old.socket_mode ||
      settings_.socket_owner != old.socket_owner || settings_.socket_group != old.socket_group) {
    // Re-creating the socket would cut off the client that may be watching
    // this very reload; the socket keeps its old settings until a restart.
    spdlog::warn("reload: control socket settings changed; they take effect at the next restart");
    settings_.socket_path = old.socket_path;
    settings_.socket_mode = old.socket_mode;
    settings_.socket_owner = old.socket_owner;
    settings_.socket_group = old.socket_group;
  }
  spdlog::info("configuration reloaded");
  std::string summary = hooks_.summary ? hooks_.summary() : std::string();
  sd_.ready(fmt::format("running{}{}", summary.empty() ? "" : ": ", summary));
  return true;
}

void Daemon::apply_prometheus() {
  exporter_.reset();
  if (!settings_.prometheus_enabled) {
    spdlog::info("prometheus endpoint off");
    return;
  }
  auto ex = PrometheusExporter::start(
      telemetry_, PrometheusOptions{.listen = settings_.prometheus_listen,
                                    .allow_non_loopback = settings_.prometheus_allow_non_loopback});
  if (!ex) {
    spdlog::error("reload: {}; the prometheus endpoint stays off", ex.error().message);
    return;
  }
  exporter_ = std::move(*ex);
}

void Daemon::step_now() {
  const TimeNs now = monotonic_now();
  Result<void> result;
  if (hooks_.step) {
    try {
      result = hooks_.step(now, paused_, telemetry_);
    } catch (const std::exception& e) {
      result = fail(fmt::format("step threw: {}", e.what()));
    }
  }
  const TimeNs took = monotonic_now() - now;
  ++steps_;
  sync_wake_fd();
  last_step_seconds_ = static_cast<double>(took) / 1e9;
  telemetry_.record_step(std::chrono::nanoseconds(took), result.has_value());
  if (!result) {
    ++step_errors_;
    // Once per distinct message: a persistent failure must not flood the journal.
    if (result.error().message != last_step_error_) {
      spdlog::error("control loop: {}", result.error().message);
    }
    last_step_error_ = result.error().message;
  } else if (!last_step_error_.empty()) {
    spdlog::info("control loop: recovered after: {}", last_step_error_);
    last_step_error_.clear();
  }
  publish_status();
}

// The fast promotion tick: armed when the hook and an interval are there.
void Daemon::arm_promote_timer() {
  if (promote_timer_) loop_->remove_timer(*promote_timer_);
  promote_timer_.reset();
  if (!hooks_.promote || settings_.promote_interval.count() <= 0) return;
  auto t = loop_->add_timer(settings_.promote_interval, settings_.promote_interval,
                            [this] { promote_now(); });
  if (t) {
    promote_timer_ = *t;
  } else {
    spdlog::error("promotion tick: {}", t.error().message);
  }
}

// The promotion tick at SCHED_IDLE for at most promote_yield (idle_yield.hpp).
// Refused (no CAP_SYS_NICE to come back): logged, and the tick runs at once.
void Daemon::apply_promote_yield() {
  idle_yield_.reset();
  if (settings_.promote_yield.count() <= 0 || !hooks_.promote) return;
  auto y = IdleYield::create(settings_.promote_yield);
  if (!y) {
    spdlog::error("{}; the promotion tick runs at once", y.error().message);
    return;
  }
  idle_yield_ = std::move(*y);
}

// The return watch's fd, registered while there is one and promote_wake is set;
// a different fd (the sources restarted) replaces the old one.
void Daemon::sync_wake_fd() {
  const bool wanted = hooks_.wake_fd && hooks_.promote && settings_.promote_wake.count() > 0;
  const int fd = wanted ? hooks_.wake_fd() : -1;
  if (fd == wake_fd_) return;
  if (wake_fd_ >= 0) loop_->remove_fd(wake_fd_);
  wake_fd_ = -1;
  wake_pending_ = false;
  if (fd < 0) return;
  if (auto ok = loop_->add_fd(fd, EPOLLIN, [this](std::uint32_t) { on_wake(); }); !ok) {
    spdlog::error("promotion wake-up: {}", ok.error().message);
    return;
  }
  wake_fd_ = fd;
}

// The first touch of a burst: stop listening (the fd stays readable until the
// tick drains it) and run the tick promote_wake from now.
void Daemon::on_wake() {
  if (wake_pending_ || wake_fd_ < 0) return;
  wake_pending_ = true;
  ++wakes_;
  if (auto ok = loop_->modify_fd(wake_fd_, 0); !ok) {
    spdlog::error("promotion wake-up: {}", ok.error().message);
  }
  const auto delay = std::chrono::duration_cast<std::chrono::nanoseconds>(settings_.promote_wake);
  auto fire = [this] {
    promote_now();
    wake_pending_ = false;
    if (wake_fd_ >= 0) {
      if (auto ok = loop_->modify_fd(wake_fd_, EPOLLIN); !ok) {
        spdlog::error("promotion wake-up: {}", ok.error().message);
      }
    }
  };
  Result<void> armed;
  if (wake_timer_) {
    armed = loop_->rearm_timer(*wake_timer_, delay, std::chrono::nanoseconds(0));
  } else if (auto id = loop_->add_timer(delay, std::chrono::nanoseconds(0), fire)) {
    wake_timer_ = *id;
  } else {
    armed = std::unexpected(id.error());
  }
  if (!armed) {
    spdlog::error("promotion wake-up: {}", armed.error().message);
    fire();
  }
}

// Errors of the tick are the step's too (the same sources, the same mover): the
// step reports them; a tick only logs at debug level.
void Daemon::promote_now() {
  if (paused_) return;
  auto tick = [this] {
    try {
      if (auto r = hooks_.promote(monotonic_now(), telemetry_); !r) {
        spdlog::debug("promotion tick: {}", r.error().message);
      }
    } catch (const std::exception& e) {
      spdlog::error("promotion tick threw: {}", e.what());
    }
  };
  if (idle_yield_ && !idle_yield_->run(tick)) {
    idle_yield_.reset();  // could not come back from SCHED_IDLE: logged; no more
  } else if (!idle_yield_) {
    tick();
  }
  if (started_) sync_wake_fd();  // the loop may want no wake-ups until its next step
}

void Daemon::publish_status() {
  if (!started_) return;
  // Only state goes into STATUS=, no per-step figures: the line changes (and
  // a datagram is sent) when the state does, not every interval. sd_notify
  // blocks once the manager's queue is full (net.unix.max_dgram_qlen).
  std::string summary = hooks_.summary ? hooks_.summary() : std::string();
  std::string text =
      fmt::format("{}{}{}{}", paused_ ? "paused" : "active", summary.empty() ? "" : "; ", summary,
                  last_step_error_.empty() ? "" : "; last step failed");
  if (text == last_status_) return;
  last_status_ = text;
  sd_.status(text);
}

json Daemon::status_json() const {
  const TimeNs now = monotonic_now();
  json prom{{"enabled", exporter_ != nullptr}};
  if (exporter_) {
    prom["listen"] = exporter_->listen();
    prom["port"] = exporter_->port();
  }
  json out{
      {"version", KVTIER_VERSION},
      {"pid", getpid()},
      {"uptime_seconds", started_ ? static_cast<double>(now - started_at_) / 1e9 : 0.0},
      {"state", paused_ ? "paused" : "active"},
      {"paused", paused_},
      {"interval_ms", settings_.interval.count()},
      {"steps", steps_},
      {"promote_wakes", wakes_},
      {"promote_yield",
       {{"ms", settings_.promote_yield.count()},
        {"on", idle_yield_ != nullptr},
        {"ticks", idle_yield_ ? idle_yield_->runs() : 0},
        {"bounded", idle_yield_ ? idle_yield_->bounded() : 0}}},
      {"step_errors", step_errors_},
      {"last_step_ms", last_step_seconds_ * 1e3},
      {"last_step_error", last_step_error_.empty() ? json(nullptr) : json(last_step_error_)},
      {"reloads", reloads_},
      {"reloads_rejected", reloads_rejected_},
      {"last_reload_errors", last_reload_errors_},
      {"last_reload", last_reload_at_ == 0
                          ? json(nullptr)
                          : json{{"seconds_ago", static_cast<double>(now - last_reload_at_) / 1e9},
                                 {"applied", last_reload_applied_}}},
      {"socket", settings_.socket_path.string()},
      {"prometheus", prom},
  };
  out["loop"] = hooks_.describe ? hooks_.describe(false) : json::object();
  return out;
}

json Daemon::dump_json() const {
  json out = status_json();
  out["settings"] = {
      {"socket_path", settings_.socket_path.string()},
      {"socket_mode", fmt::format("{:04o}", settings_.socket_mode)},
      {"socket_owner", settings_.socket_owner},
      {"socket_group", settings_.socket_group},
      {"prometheus_enabled", settings_.prometheus_enabled},
      {"prometheus_listen", settings_.prometheus_listen},
      {"prometheus_allow_non_loopback", settings_.prometheus_allow_non_loopback},
      {"interval_ms", settings_.interval.count()},
      {"log_level", settings_.log_level},
  };
  out["telemetry"] = telemetry_.to_json();
  out["loop"] = hooks_.describe ? hooks_.describe(true) : json::object();
  return out;
}

}  // namespace kvtier::agent
