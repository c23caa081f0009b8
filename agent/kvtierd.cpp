// kvtierd: keeps the hot part of the KV cache in DRAM and moves the cold part
// to CXL memory. This file turns flags and the config into a running Daemon;
// the loop's work is plugged in through DaemonHooks.
//
// Exit status: 0 stopped cleanly, 1 failed while running, 2 bad usage,
// 3 invalid configuration, 4 a required capability is missing.

#include <spdlog/spdlog.h>
#include <toml++/toml.h>
#include <unistd.h>
#include <CLI/CLI.hpp>

#include <csignal>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "agent/daemon/capabilities.hpp"
#include "agent/daemon/daemon.hpp"
#include "agent/daemon/logging.hpp"
#include "agent/host_paths.hpp"
#include "agent/nodes_report.hpp"
#include "agent/sysfs.hpp"
#include "agent/topology_reader.hpp"
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

// The config file -> the daemon's settings. Until policy/config.hpp's
// load_config is wired in (the lead's merge), this checks that the file is
// readable TOML and takes the daemon's settings from their defaults.
Result<agent::DaemonSettings> load_settings(const Options& opt) {
  auto text = agent::read_text(opt.config);
  if (!text) {
    return kvtier::fail(fmt::format("{} (install the default config with cmake --install, or "
                                    "pass --config PATH)",
                                    text.error().message),
                        text.error().code);
  }
  try {
    [[maybe_unused]] auto table = toml::parse(*text, opt.config);
  } catch (const toml::parse_error& e) {
    return kvtier::fail(fmt::format("{}:{}:{}: {}", opt.config, e.source().begin.line,
                                    e.source().begin.column, e.description()));
  }
  agent::DaemonSettings s;
  if (!opt.socket.empty()) s.socket_path = opt.socket;
  if (!opt.log_level.empty()) s.log_level = opt.log_level;
  if (auto ok = agent::validate_settings(s); !ok) {
    return kvtier::fail(opt.config + ": " + ok.error().message);
  }
  return s;
}

void log_lines(const std::string& prefix, const std::string& text) {
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) spdlog::error("{}{}", prefix, line);
}

int run(int argc, char** argv) {
  CLI::App app{"kvtierd: keeps hot KV-cache pages in DRAM and moves cold ones to CXL memory"};
  app.set_version_flag("--version", std::string("kvtierd ") + KVTIER_VERSION);
  Options opt;
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

  const auto style = opt.foreground || isatty(STDERR_FILENO) != 0 ? agent::LogStyle::kTerminal
                                                                  : agent::LogStyle::kJournal;
  if (auto ok = agent::setup_logging(style, opt.log_level.empty() ? "info" : opt.log_level); !ok) {
    std::fprintf(stderr, "kvtierd: --log-level: %s\n", ok.error().message.c_str());
    return kExitUsage;
  }

  auto settings = load_settings(opt);
  if (opt.check_config) {
    if (!settings) {
      // For a person or ExecStartPre=: plain lines, no journal priority prefix.
      std::istringstream lines(settings.error().message);
      for (std::string line; std::getline(lines, line);) {
        std::fprintf(stderr, "kvtierd: %s\n", line.c_str());
      }
      return kExitConfig;
    }
    std::printf("%s: configuration valid\n", opt.config.c_str());
    return kExitOk;
  }
  if (!settings) {
    log_lines("invalid configuration: ", settings.error().message);
    return kExitConfig;
  }
  if (opt.log_level.empty()) {
    spdlog::set_level(spdlog::level::from_str(settings->log_level));
  }

  const auto paths = opt.root.empty() ? agent::HostPaths{} : agent::HostPaths::under(opt.root);
  auto topo = agent::read_topology(paths);
  if (!topo) {
    spdlog::error("{}", topo.error().message);
    return kExitFailed;
  }
  bool any_target = false;
  for (const auto& role : kvtier::policy::classify_nodes(*topo)) {
    any_target = any_target || role.demotion_target;
    spdlog::info("node {}: {}", role.node, role.reason);
  }
  const bool observe_only = !any_target;
  if (observe_only) {
    spdlog::warn(
        "observe-only mode: no demotion target node on this host (a memory-only node in "
        "a lower memory tier); heat is measured, no page is moved");
  }

  std::vector<agent::Feature> features{agent::Feature::kBpfSources, agent::Feature::kTargetProcfs};
  if (!observe_only) features.push_back(agent::Feature::kMovePages);
  if (auto caps = agent::check_capabilities(agent::capabilities_for(features)); !caps) {
    spdlog::error("{}", caps.error().message);
    return kExitCapability;
  }

  // The loop's work until sources, planner and movers are wired in: keep the
  // per-node memory figures current.
  agent::DaemonHooks hooks;
  auto last_topo = std::make_shared<kvtier::policy::Topology>(*topo);
  hooks.step = [paths, last_topo](const agent::StepContext&, agent::Telemetry& t) -> Result<void> {
    auto now = agent::read_topology(paths);
    if (!now) return std::unexpected(now.error());
    *last_topo = std::move(*now);
    for (const auto& n : last_topo->nodes) {
      const agent::MetricLabels node{{"node", fmt::format("{}", n.id)}};
      t.set("kvtier_node_memory_free_bytes", node, static_cast<double>(n.mem_free_bytes));
      t.set("kvtier_node_memory_total_bytes", node, static_cast<double>(n.mem_total_bytes));
    }
    return {};
  };
  hooks.describe = [last_topo, observe_only](bool) {
    return nlohmann::json{{"observe_only", observe_only}, {"nodes", agent::nodes_json(*last_topo)}};
  };
  hooks.summary = [observe_only] { return std::string(observe_only ? "observe-only" : ""); };
  hooks.reload = [opt]() -> Result<agent::DaemonSettings> { return load_settings(opt); };

  auto daemon = agent::Daemon::create(*settings, std::move(hooks));
  if (!daemon) {
    log_lines("", daemon.error().message);
    return kExitConfig;
  }
  (*daemon)->telemetry().describe("kvtier_node_memory_free_bytes", agent::MetricKind::kGauge,
                                  "Free memory on each NUMA node");
  (*daemon)->telemetry().describe("kvtier_node_memory_total_bytes", agent::MetricKind::kGauge,
                                  "Total memory on each NUMA node");
  if (auto ok = (*daemon)->run(); !ok) {
    spdlog::error("{}", ok.error().message);
    return kExitFailed;
  }
  return kExitOk;
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
