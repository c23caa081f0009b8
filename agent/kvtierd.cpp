// kvtierd: keeps the hot part of the KV cache in DRAM and moves the cold part
// to CXL memory. This file turns flags and the config into a running Daemon;
// the loop's work (agent/loop/controller.hpp) is plugged in through
// DaemonHooks, its views through register_view_commands().
//
// Exit status: 0 stopped cleanly, 1 failed while running, 2 bad usage,
// 3 invalid configuration, 4 a required capability is missing.

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <sys/epoll.h>
#include <unistd.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cerrno>
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
#include "agent/daemon/daemon.hpp"
#include "agent/daemon/daemon_settings.hpp"
#include "agent/daemon/logging.hpp"
#include "agent/daemon/view_commands.hpp"
#include "agent/host/clock.hpp"
#include "agent/host/damon_sysfs.hpp"
#include "agent/host/host_paths.hpp"
#include "agent/host/huge_pages.hpp"
#include "agent/host/move_pages_call.hpp"
#include "agent/host/numa_tiering.hpp"
#include "agent/host/residency.hpp"
#include "agent/host/self_memory.hpp"
#include "agent/host/topology_reader.hpp"
#include "agent/loop/controller.hpp"
#include "agent/loop/ingest.hpp"
#include "agent/loop/kernel_refusals.hpp"
#include "agent/loop/recording.hpp"
#include "agent/loop/shared_pools.hpp"
#include "agent/loop/views.hpp"
#include "agent/movers/dry_run_mover.hpp"
#include "agent/movers/move_pages_mover.hpp"
#include "agent/sources/bpf_events.hpp"
#include "agent/sources/damon_source.hpp"
#include "agent/sources/process_watcher.hpp"
#include "agent/sources/source_registry.hpp"
#include "agent/telemetry/telemetry.hpp"
#include "policy/config.hpp"
#include "policy/error.hpp"
#include "policy/topology.hpp"
#include "policy/types.hpp"

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
  s.prometheus_allow_non_loopback = cfg.telemetry.prometheus_allow_non_loopback;
  s.interval = std::chrono::milliseconds(cfg.daemon.interval / 1'000'000);
  s.promote_interval =
      std::chrono::milliseconds(cfg.daemon.promote_interval.value_or(0) / 1'000'000);
  s.promote_wake = std::chrono::milliseconds(cfg.daemon.promote_wake.value_or(0) / 1'000'000);
  s.promote_yield = std::chrono::milliseconds(cfg.daemon.promote_yield.value_or(0) / 1'000'000);
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
  agent::SourceRegistry reg;
  agent::register_builtin_sources(reg, paths, agent::source_options(cfg));
  return agent::select_sources(reg, cfg.sources.use, cfg.sources.force);
}

bool has_demotion_target(const kvtier::policy::Topology& topo) {
  return std::ranges::any_of(kvtier::policy::classify_nodes(topo),
                             [](const auto& role) { return role.demotion_target; });
}

// Everything start-up refuses because of the configuration (or the command
// line), apart from parsing it: the socket's owner, group and path, a forced
// source this host lacks. `kvtierd --check-config`
// runs it too, so ExecStartPre= fails where start-up would (exit 3) instead of
// systemd restarting a daemon that can never start.
Result<void> startup_problems(const Options& opt, const agent::HostPaths& paths,
                              const kvtier::policy::Config& cfg,
                              const agent::DaemonSettings& settings) {
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

// Why kvtierd observes only ("" when it may move pages).
std::string observe_reason(const kvtier::policy::Topology& topo) {
  for (const auto& role : kvtier::policy::classify_nodes(topo)) {
    spdlog::info("node {}: {}", role.node, role.reason);
  }
  if (!has_demotion_target(topo)) {
    return "no demotion target node on this host (a memory-only node in a lower memory tier)";
  }
  return {};
}

// The hotness sources the config asks for, after the capability check. The
// error's code is the exit status: 4 when a source the host supports was
// refused for a missing capability (kvtierd must not run blind because a unit
// left out CAP_BPF), 1 when a forced source cannot run. None available for
// other reasons: no source, heat unknown, nothing demoted.
// `run_dir`: kvtierd's runtime directory, where a DAMON source notes which kdamond is its own.
// `refused`: the sources the kernel refused (DAMON busy, lockdown, no BTF), one log line each.
Result<std::vector<agent::LoopSource>> make_sources(const agent::HostPaths& paths,
                                                    const kvtier::policy::Config& cfg,
                                                    const std::filesystem::path& run_dir,
                                                    std::vector<agent::SourceRefusal>& refused) {
  auto choice = choose_sources(paths, cfg);
  std::vector<agent::LoopSource> out;
  if (!choice) {
    if (choice.error().code == EPERM) {
      return kvtier::fail("missing capability: " + choice.error().message, kExitCapability);
    }
    if (cfg.sources.force) return kvtier::fail(choice.error().message, kExitFailed);
    spdlog::warn("{}: heat is unknown, nothing will be demoted", choice.error().message);
    return out;
  }
  std::string lacking;
  std::string why;
  for (const auto& r : choice->reports) {
    if (!r.availability.missing_capability) continue;
    lacking +=
        fmt::format("{}{}", lacking.empty() ? "" : ", ", kvtier::policy::source_name(r.kind));
    if (why.empty()) why = r.availability.why;
  }
  if (!lacking.empty()) {
    return kvtier::fail(fmt::format("missing capability: {} in sources.use cannot run: {} (or "
                                    "leave {} out of sources.use)",
                                    lacking, why, lacking),
                        kExitCapability);
  }
  std::vector<agent::Feature> features;
  for (const auto& c : choice->sources) features.push_back(agent::feature_for(c.source->kind()));
  if (auto caps = agent::check_capabilities(agent::capabilities_for(features)); !caps) {
    return kvtier::fail(caps.error().message, kExitCapability);
  }
  spdlog::info("hotness sources: {}", choice->summary);
  refused = agent::kernel_refusals(choice->reports);
  for (const auto& r : refused) {
    spdlog::warn("source {} refused by the kernel: {}; kvtierd runs with the other sources",
                 kvtier::policy::source_name(r.kind), r.why);
  }
  for (auto& c : choice->sources) {
    if (auto* damon = dynamic_cast<agent::DamonSource*>(c.source.get())) {
      damon->set_owner_file(run_dir / "damon.kdamond");
    }
    out.push_back({.source = std::move(c.source), .reason = std::move(c.reason)});
  }
  return out;
}

// The loop's pieces: the hotness sources, the mover (or why none), after the
// capability check. The error's code is the exit status.
Result<agent::ControllerDeps> make_deps(const agent::HostPaths& paths,
                                        const kvtier::policy::Topology& topo,
                                        const kvtier::policy::Config& cfg,
                                        const std::filesystem::path& run_dir) {
  const std::string observe = observe_reason(topo);
  std::vector<agent::SourceRefusal> refused;
  auto sources = make_sources(paths, cfg, run_dir, refused);
  if (!sources) {
    spdlog::error("{}", sources.error().message);
    return std::unexpected(sources.error());
  }
  std::vector<agent::Feature> features{agent::Feature::kTargetProcfs};
  if (observe.empty()) features.push_back(agent::Feature::kMovePages);
  if (auto caps = agent::check_capabilities(agent::capabilities_for(features)); !caps) {
    spdlog::error("{}", caps.error().message);
    return kvtier::fail(caps.error().message, kExitCapability);
  }
  // A shared pool's pages that its owner never touched are found, and moved,
  // through the pool's other mappings (agent/loop/shared_pools.hpp).
  auto pools = std::make_shared<agent::SharedPools>();
  const agent::MovePagesFn move_pages = agent::through_sharers(agent::system_move_pages(), pools);
  agent::ControllerDeps deps{
      .paths = paths,
      .sources = std::move(*sources),
      .refused_sources = std::move(refused),
      .residency = agent::ResidencyReader(move_pages, 4096,
                                          std::make_shared<agent::KpageflagsHugeProbe>(paths)),
      .self = getpid(),
      .pools = pools};
  if (!observe.empty()) {
    deps.observe_reason = observe;
    spdlog::warn("observe-only mode: {}; heat is measured, no page is moved", observe);
  } else if (cfg.mover.kind == kvtier::policy::MoverKind::kDryRun) {
    deps.mover = std::make_unique<agent::DryRunMover>();
  } else {
    deps.tiering = std::make_unique<agent::KernelTiering>(paths);
    agent::MovePagesDeps mover_deps;
    mover_deps.move_pages = move_pages;
    deps.mover = std::make_unique<agent::MovePagesMover>(
        // MPOL_MF_MOVE_ALL: a shared pool's pages are mapped by every sharer
        // (docs/configuration.md, "Shared pools"); kvtierd holds CAP_SYS_NICE for it.
        agent::MovePagesConfig{.batch_units = cfg.mover.batch_pages, .move_shared = true},
        std::move(mover_deps));
  }
  return deps;
}

// The process watcher, when this host and kvtierd's capabilities allow it:
// new targets join as they exec, ended ones leave at once. Else
// deps.discovery says why targets are found by reading /proc every step.
std::shared_ptr<agent::ProcessWatcher> start_watcher(const agent::HostPaths& paths,
                                                     agent::ControllerDeps& deps) {
  auto w = std::make_shared<agent::ProcessWatcher>(paths);
  const agent::Availability a = w->probe();
  std::string why = a.why;
  if (a.ok) {
    auto ok = w->start();
    if (ok) {
      deps.process_events = true;
      deps.discovery = "process watcher (exec, fork, exit); /proc read in full every 30 s";
      spdlog::info("targets: {}", deps.discovery);
      return w;
    }
    why = ok.error().message;
  }
  deps.discovery = "/proc read every step (process watcher: " + why + ")";
  spdlog::warn("targets: {}", deps.discovery);
  return nullptr;
}

// A reload: the new config, checked as at start, then applied (the groups,
// limits, [tiering], the daemon shell's keys; new sources when [sources]
// changed) or refused whole, naming each key that needs a restart.
Result<agent::DaemonSettings> reload_config(const Options& opt, const agent::HostPaths& paths,
                                            agent::Controller& controller) {
  auto now_topo = agent::read_topology(paths);
  auto next = load_config(opt, now_topo ? &*now_topo : nullptr);
  if (!next) return std::unexpected(next.error());
  auto next_settings = settings_from(opt, next->config);
  if (!next_settings) return next_settings;
  const kvtier::policy::Config& running = controller.state().config.config;
  std::vector<std::string> keys = kvtier::policy::keys_needing_restart(running, next->config);
  // --socket overrides the file's socket path.
  if (!opt.socket.empty()) std::erase(keys, "telemetry.socket");
  if (!keys.empty()) {
    std::string list;
    for (const auto& k : keys) list += (list.empty() ? "" : ", ") + k;
    return kvtier::fail(
        fmt::format("{}: {} changed and need{} a restart (systemctl restart kvtierd); nothing "
                    "was applied",
                    opt.config, list, keys.size() == 1 ? "s" : ""));
  }
  std::optional<std::vector<agent::LoopSource>> sources;
  std::vector<agent::SourceRefusal> refused;
  if (kvtier::policy::sources_changed(running, next->config)) {
    auto made =
        make_sources(paths, next->config, next_settings->socket_path.parent_path(), refused);
    if (!made) return kvtier::fail(opt.config + ": [sources]: " + made.error().message);
    sources = std::move(*made);
  }
  controller.apply_config(std::move(*next), agent::monotonic_now());
  if (sources) {
    controller.replace_sources(std::move(*sources), std::move(refused));
  }
  return next_settings;
}

// Runs the daemon shell around the loop until SIGTERM/SIGINT.
int serve(const Options& opt, const agent::HostPaths& paths,
          const std::shared_ptr<agent::Controller>& controller,
          const std::shared_ptr<agent::ProcessWatcher>& watcher,
          const agent::DaemonSettings& settings) {
  agent::DaemonHooks hooks;
  hooks.step = [controller](kvtier::TimeNs now, bool paused, agent::Telemetry& t) {
    return controller->step(agent::StepContext{.now = now, .paused = paused}, t);
  };
  hooks.promote = [controller](kvtier::TimeNs now, agent::Telemetry& t) {
    return controller->promote_step(agent::StepContext{.now = now}, t);
  };
  hooks.wake_fd = [controller] { return controller->wake_fd(); };
  hooks.describe = [controller](bool full) {
    return agent::describe(controller->state(), full, agent::monotonic_now());
  };
  hooks.summary = [controller] { return agent::summary(controller->state()); };
  hooks.shutdown = [controller, watcher] {
    if (watcher) watcher->stop();
    controller->shutdown();
  };
  hooks.reload = [opt, paths, controller]() { return reload_config(opt, paths, *controller); };
  auto daemon = agent::Daemon::create(settings, std::move(hooks));
  if (!daemon) {
    log_lines("", daemon.error().message);
    return kExitConfig;
  }
  agent::register_view_commands(**daemon, controller);
  if (watcher) {
    auto ok = (*daemon)->loop().add_fd(watcher->epoll_fd(), EPOLLIN,
                                       [watcher, controller](std::uint32_t) {
                                         std::vector<agent::ProcEvent> events;
                                         if (auto n = watcher->poll(0, events); !n) {
                                           spdlog::warn("process watcher: {}", n.error().message);
                                         }
                                         controller->on_process_events(events);
                                       });
    if (!ok) {
      spdlog::error("process watcher: {}", ok.error().message);
      return kExitFailed;
    }
  }
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
    if (auto ok = startup_problems(opt, paths, cc->config, *settings); !ok) {
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
  if (!agent::return_freed_memory_promptly()) {
    spdlog::warn(
        "the C library refused mallopt(M_MMAP_THRESHOLD, M_TRIM_THRESHOLD): kvtierd may "
        "keep memory it freed (status: loop.memory.resident_bytes)");
  }
  // Beside the control socket, in kvtierd's runtime directory (the unit keeps it): what a
  // kvtierd killed before it could clean up left. Its kdamond goes before the sources are
  // probed (a kdamond that is on makes DAMON look busy); its knob values go to KernelTiering.
  const std::filesystem::path run_dir = settings->socket_path.parent_path();
  if (auto line = agent::DamonSysfs::under(paths).reclaim_leftover(run_dir / "damon.kdamond")) {
    spdlog::warn("damon: {}", *line);
  }
  auto deps = make_deps(paths, *topo, cc->config, run_dir);
  if (!deps) return deps.error().code;
  if (deps->tiering) deps->tiering->set_journal(run_dir / "tiering.saved");
  auto watcher = start_watcher(paths, *deps);
  const auto daemon_cfg = cc->config.daemon;
  auto controller =
      std::make_shared<agent::Controller>(std::move(*cc), std::move(*deps), agent::monotonic_now());
  if (!daemon_cfg.record.empty()) {
    // A recording that cannot start (the file exists) is logged; the daemon runs without it.
    if (auto ok = controller->recorder().start(
            daemon_cfg.record,
            agent::RecordingLimits{.max_bytes = daemon_cfg.record_max_bytes,
                                   .max_duration = daemon_cfg.record_max_duration},
            agent::monotonic_now());
        !ok) {
      spdlog::error("daemon.record: {}", ok.error().message);
    }
  }
  return serve(opt, paths, controller, watcher, *settings);
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
