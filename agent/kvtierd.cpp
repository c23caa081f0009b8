// kvtierd: keeps the hot part of the KV cache in DRAM and moves the cold part
// to CXL memory. This file turns flags and the config into a running Daemon;
// the loop's work (agent/daemon/controller.hpp) is plugged in through
// DaemonHooks, its views through register_view_commands().
//
// Exit status: 0 stopped cleanly, 1 failed while running, 2 bad usage,
// 3 invalid configuration, 4 a required capability is missing.

#include <spdlog/spdlog.h>
#include <unistd.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "agent/daemon/capabilities.hpp"
#include "agent/daemon/control_server.hpp"
#include "agent/daemon/controller.hpp"
#include "agent/daemon/daemon.hpp"
#include "agent/daemon/daemon_settings.hpp"
#include "agent/daemon/logging.hpp"
#include "agent/daemon/recording.hpp"
#include "agent/daemon/telemetry.hpp"
#include "agent/daemon/view_commands.hpp"
#include "agent/daemon/views.hpp"
#include "agent/host/clock.hpp"
#include "agent/host/host_paths.hpp"
#include "agent/host/huge_pages.hpp"
#include "agent/host/move_pages_call.hpp"
#include "agent/host/numa_tiering.hpp"
#include "agent/host/residency.hpp"
#include "agent/host/topology_reader.hpp"
#include "agent/movers/dry_run_mover.hpp"
#include "agent/movers/move_pages_mover.hpp"
#include "agent/sources/source_registry.hpp"
#include "policy/config.hpp"
#include "policy/error.hpp"
#include "policy/topology.hpp"

namespace {

namespace agent = kvtier::agent;
using kvtier::Result;

constexpr int kExitOk = 0;
constexpr int kExitFailed = 1;
constexpr int kExitUsage = 2;
constexpr int kExitConfig = 3;
constexpr int kExitCapability = 4;

struct Options {
  std::string config = KVTIER_DEFAULT_CONFIG;
  bool check_config = false;
  bool foreground = false;
  std::string log_level;  // empty: from the config
  std::string socket;     // empty: from the config
  std::string root;
};

// The config file, parsed and compiled by the same code as `kvtierctl config
// check`; every problem is one line of the error message.
Result<kvtier::policy::CompiledConfig> load_config(const Options& opt,
                                                   const kvtier::policy::Topology* topo) {
  auto cc = kvtier::policy::load_compiled_config(opt.config, topo);
  if (!cc) {
    // A bounded number of lines: a broken 1 MB file must not flood the journal
    // or every later `status` reply.
    std::string lines;
    for (const auto& l : kvtier::policy::problem_lines(cc.error())) {
      lines += (lines.empty() ? "" : "\n") + l;
    }
    return kvtier::fail(lines);
  }
  return std::move(*cc);
}

// The daemon shell's part of the config, with the command line's overrides.
Result<agent::DaemonSettings> settings_from(const Options& opt, const kvtier::policy::Config& cfg) {
  agent::DaemonSettings s;
  s.socket_path = opt.socket.empty() ? cfg.telemetry.socket : opt.socket;
  s.socket_mode = cfg.telemetry.socket_mode;
  s.socket_group = cfg.telemetry.socket_group;
  s.prometheus_enabled = cfg.telemetry.prometheus;
  s.prometheus_listen = cfg.telemetry.prometheus_listen;
  s.interval = std::chrono::milliseconds(cfg.daemon.interval / 1'000'000);
  s.promote_interval =
      std::chrono::milliseconds(cfg.daemon.promote_interval.value_or(0) / 1'000'000);
  s.log_level = opt.log_level.empty()
                    ? std::string(kvtier::policy::log_level_name(cfg.logging.level))
                    : opt.log_level;
  if (auto ok = agent::validate_settings(s); !ok) {
    return kvtier::fail(opt.config + ": " + ok.error().message);
  }
  return s;
}

// The hotness sources: the config's forced one, else every available one it
// lists; every source probed says why it was or was not taken.
Result<agent::SourceChoice> choose_sources(const agent::HostPaths& paths,
                                           const kvtier::policy::Config& cfg) {
  agent::SourceOptions so;
  so.pmu.sample_period = cfg.sources.sample_period;
  so.pmu.max_samples_per_sec = cfg.sources.max_samples_per_sec;
  so.pmu_soft.sample_period = cfg.sources.sample_period;
  so.pmu_soft.max_samples_per_sec = cfg.sources.max_samples_per_sec;
  const auto damon = kvtier::policy::damon_intervals(cfg);
  so.damon.sample_us = damon.sample / 1000;
  so.damon.aggr_us = damon.aggr / 1000;
  so.damon.min_regions = cfg.sources.damon_min_regions;
  so.damon.max_regions = cfg.sources.damon_max_regions;
  so.idle.scan_interval = cfg.sources.idle_scan_interval;
  agent::SourceRegistry reg;
  agent::register_builtin_sources(reg, paths, so);
  return agent::select_sources(reg, cfg.sources.use, cfg.sources.force);
}

bool has_demotion_target(const kvtier::policy::Topology& topo) {
  return std::ranges::any_of(kvtier::policy::classify_nodes(topo),
                             [](const auto& role) { return role.demotion_target; });
}

// Everything start-up refuses because of the configuration (or the command
// line), apart from parsing it: the socket's owner, group and path, the mover
// this host can run, a forced source this host lacks. `kvtierd --check-config`
// runs it too, so ExecStartPre= fails where start-up would (exit 3) instead of
// systemd restarting a daemon that can never start.
Result<void> startup_problems(const Options& opt, const agent::HostPaths& paths,
                              const kvtier::policy::Config& cfg,
                              const agent::DaemonSettings& settings,
                              const kvtier::policy::Topology* topo) {
  std::vector<std::string> errors;
  if (auto ok =
          agent::check_socket_options(agent::ControlSocketOptions{.path = settings.socket_path,
                                                                  .mode = settings.socket_mode,
                                                                  .owner = settings.socket_owner,
                                                                  .group = settings.socket_group});
      !ok) {
    std::istringstream lines(ok.error().message);
    for (std::string line; std::getline(lines, line);) errors.push_back(opt.config + ": " + line);
  }
  if (topo != nullptr && has_demotion_target(*topo) &&
      cfg.mover.kind == kvtier::policy::MoverKind::kDamos) {
    errors.push_back(opt.config +
                     ": mover.kind = \"damos\": kvtierd does not drive DAMOS schemes itself yet; "
                     "use \"move_pages\" or \"dry-run\"");
  }
  if (cfg.sources.force) {
    if (auto choice = choose_sources(paths, cfg); !choice) {
      errors.push_back(opt.config + ": sources.force: " + choice.error().message);
    }
  }
  if (errors.empty()) return {};
  std::string msg;
  for (const auto& e : errors) msg += (msg.empty() ? "" : "\n") + e;
  return kvtier::fail(msg);
}

void log_lines(const std::string& prefix, const std::string& text) {
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) spdlog::error("{}{}", prefix, line);
}

// The command line; an exit status when it says to stop (--help, --version, a mistake).
std::optional<int> parse_options(int argc, char** argv, Options& opt) {
  CLI::App app{"kvtierd: keeps hot KV-cache pages in DRAM and moves cold ones to CXL memory"};
  app.set_version_flag("--version", std::string("kvtierd ") + KVTIER_VERSION);
  app.add_option("--config", opt.config, "Configuration file")
      ->option_text("PATH")
      ->capture_default_str();
  app.add_flag("--check-config", opt.check_config,
               "Load and validate the configuration, print the result and exit (0 valid, 3 not)");
  app.add_flag("--foreground", opt.foreground,
               "Log for a terminal (time and level) instead of for the journal (priority prefix)");
  app.add_option("--log-level", opt.log_level,
                 "trace, debug, info, warn, error, critical or off (overrides the config)")
      ->option_text("LEVEL");
  app.add_option("--socket", opt.socket, "Control socket path (overrides the config)")
      ->option_text("PATH");
  app.add_option("--root", opt.root, "Read /proc and /sys under DIR (for tests)")
      ->option_text("DIR");
  app.footer(
      "Exit status: 0 stopped cleanly, 1 failed while running, 2 bad usage, 3 invalid "
      "configuration, 4 missing capability.\nSignals: SIGHUP reloads the configuration, "
      "SIGTERM and SIGINT stop.");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? kExitOk : kExitUsage;
  }
  return std::nullopt;
}

// --check-config: plain lines for a person or ExecStartPre=, no journal prefix.
int check_config(const Options& opt, const Result<agent::DaemonSettings>& settings,
                 std::size_t groups) {
  if (!settings) {
    std::istringstream lines(settings.error().message);
    for (std::string line; std::getline(lines, line);) {
      std::fprintf(stderr, "kvtierd: %s\n", line.c_str());
    }
    return kExitConfig;
  }
  std::printf("%s: configuration valid (%zu target groups)\n", opt.config.c_str(), groups);
  return kExitOk;
}

// Why kvtierd observes only ("" when it may move pages). A mover it cannot
// run was refused before, by startup_problems().
std::string observe_reason(const kvtier::policy::Topology& topo) {
  for (const auto& role : kvtier::policy::classify_nodes(topo)) {
    spdlog::info("node {}: {}", role.node, role.reason);
  }
  if (!has_demotion_target(topo)) {
    return "no demotion target node on this host (a memory-only node in a lower memory tier)";
  }
  return {};
}

// The loop's pieces: the hotness source, the mover (or why none), after the
// capability check. The error's code is the exit status.
Result<agent::ControllerDeps> make_deps(const agent::HostPaths& paths,
                                        const kvtier::policy::Topology& topo,
                                        const kvtier::policy::Config& cfg) {
  const std::string observe = observe_reason(topo);
  auto choice = choose_sources(paths, cfg);
  if (!choice && cfg.sources.force) {
    spdlog::error("{}", choice.error().message);
    return kvtier::fail(choice.error().message, kExitFailed);
  }
  if (!choice) {
    spdlog::warn("{}: heat is unknown, nothing will be demoted", choice.error().message);
  } else {
    spdlog::info("hotness sources: {}", choice->summary);
  }
  std::vector<agent::Feature> features{agent::Feature::kTargetProcfs};
  if (choice) {
    for (const auto& c : choice->sources) features.push_back(agent::feature_for(c.source->kind()));
  }
  if (observe.empty()) features.push_back(agent::Feature::kMovePages);
  if (auto caps = agent::check_capabilities(agent::capabilities_for(features)); !caps) {
    spdlog::error("{}", caps.error().message);
    return kvtier::fail(caps.error().message, kExitCapability);
  }
  agent::ControllerDeps deps{
      .paths = paths,
      .residency = agent::ResidencyReader(agent::system_move_pages(), 4096,
                                          std::make_shared<agent::KpageflagsHugeProbe>(paths)),
      .self = getpid()};
  if (choice) {
    for (auto& c : choice->sources) {
      deps.sources.push_back({.source = std::move(c.source), .reason = std::move(c.reason)});
    }
  }
  if (!observe.empty()) {
    deps.observe_reason = observe;
    spdlog::warn("observe-only mode: {}; heat is measured, no page is moved", observe);
  } else if (cfg.mover.kind == kvtier::policy::MoverKind::kDryRun) {
    deps.mover = std::make_unique<agent::DryRunMover>();
  } else {
    deps.tiering = std::make_unique<agent::KernelTiering>(paths);
    deps.mover = std::make_unique<agent::MovePagesMover>(
        agent::MovePagesConfig{.batch_units = cfg.mover.batch_pages});
  }
  return deps;
}

// Runs the daemon shell around the loop until SIGTERM/SIGINT.
int serve(const Options& opt, const agent::HostPaths& paths,
          const std::shared_ptr<agent::Controller>& controller,
          const agent::DaemonSettings& settings) {
  agent::DaemonHooks hooks;
  hooks.step = [controller](const agent::StepContext& ctx, agent::Telemetry& t) {
    return controller->step(ctx, t);
  };
  hooks.promote = [controller](const agent::StepContext& ctx, agent::Telemetry& t) {
    return controller->promote_step(ctx, t);
  };
  hooks.describe = [controller](bool full) {
    return agent::describe(controller->state(), full, agent::monotonic_now());
  };
  hooks.summary = [controller] { return agent::summary(controller->state()); };
  hooks.shutdown = [controller] { controller->shutdown(); };
  hooks.reload = [opt, paths, controller]() -> Result<agent::DaemonSettings> {
    auto now_topo = agent::read_topology(paths);
    auto next = load_config(opt, now_topo ? &*now_topo : nullptr);
    if (!next) return std::unexpected(next.error());
    auto next_settings = settings_from(opt, next->config);
    if (!next_settings) return next_settings;
    controller->apply_config(std::move(*next));
    return next_settings;
  };
  auto daemon = agent::Daemon::create(settings, std::move(hooks));
  if (!daemon) {
    log_lines("", daemon.error().message);
    return kExitConfig;
  }
  agent::register_view_commands(**daemon, controller);
  agent::register_record_command(**daemon, controller);
  if (auto ok = (*daemon)->run(); !ok) {
    spdlog::error("{}", ok.error().message);
    return kExitFailed;
  }
  return kExitOk;
}

int run(int argc, char** argv) {
  Options opt;
  if (auto rc = parse_options(argc, argv, opt)) return *rc;
  const auto style = opt.foreground || isatty(STDERR_FILENO) != 0 ? agent::LogStyle::kTerminal
                                                                  : agent::LogStyle::kJournal;
  if (auto ok = agent::setup_logging(style, opt.log_level.empty() ? "info" : opt.log_level); !ok) {
    std::fprintf(stderr, "kvtierd: --log-level: %s\n", ok.error().message.c_str());
    return kExitUsage;
  }
  const auto paths = opt.root.empty() ? agent::HostPaths{} : agent::HostPaths::under(opt.root);
  auto topo = agent::read_topology(paths);
  // Unknown demotion nodes are config errors only when the topology is known.
  auto cc = load_config(opt, topo ? &*topo : nullptr);
  Result<agent::DaemonSettings> settings =
      cc ? settings_from(opt, cc->config) : std::unexpected(cc.error());
  if (settings) {
    if (auto ok = startup_problems(opt, paths, cc->config, *settings, topo ? &*topo : nullptr);
        !ok) {
      settings = std::unexpected(ok.error());
    }
  }
  if (opt.check_config) return check_config(opt, settings, cc ? cc->config.groups.size() : 0);
  if (!settings) {
    log_lines("invalid configuration: ", settings.error().message);
    return kExitConfig;
  }
  if (opt.log_level.empty()) spdlog::set_level(spdlog::level::from_str(settings->log_level));
  if (!topo) {
    spdlog::error("{}", topo.error().message);
    return kExitFailed;
  }
  auto deps = make_deps(paths, *topo, cc->config);
  if (!deps) return deps.error().code;
  const auto daemon_cfg = cc->config.daemon;
  auto controller =
      std::make_shared<agent::Controller>(std::move(*cc), std::move(*deps), agent::monotonic_now());
  if (!daemon_cfg.record.empty()) {
    // A recording that cannot start (the file exists) is logged; the daemon runs without it.
    if (auto ok = controller->start_recording(
            daemon_cfg.record,
            agent::RecordingLimits{.max_bytes = daemon_cfg.record_max_bytes,
                                   .max_duration = daemon_cfg.record_max_duration},
            agent::monotonic_now());
        !ok) {
      spdlog::error("daemon.record: {}", ok.error().message);
    }
  }
  return serve(opt, paths, controller, *settings);
}

}  // namespace

int main(int argc, char** argv) {
  // Replies go out with MSG_NOSIGNAL; this covers the Prometheus server's sockets.
  std::signal(SIGPIPE, SIG_IGN);
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fputs((std::string("kvtierd: ") + e.what() + "\n").c_str(), stderr);
    return kExitFailed;
  }
}
