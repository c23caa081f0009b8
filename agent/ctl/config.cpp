// kvtierctl config check FILE: the very parse + compile steps kvtierd runs, with
// explicit demotion nodes checked against this host's topology (or --root's).

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "agent/ctl/command.hpp"
#include "agent/host/topology_reader.hpp"
#include "policy/config.hpp"
#include "policy/topology.hpp"
#include "policy/units.hpp"

namespace kvtier::agent::ctl {
namespace {

std::string demotion_text(const policy::GroupConfig& g,
                          const std::optional<policy::Topology>& topo) {
  if (g.demotion_node) return fmt::format("node {}", *g.demotion_node);
  if (!topo) return "auto";
  std::vector<int> targets;
  for (const auto& role : policy::classify_nodes(*topo)) {
    if (role.demotion_target) targets.push_back(role.node);
  }
  if (targets.empty()) return "auto (no demotion node on this host)";
  return fmt::format("auto (node {})", fmt::join(targets, ", "));
}

int check(const std::string& file, bool use_topology, const Globals& g) {
  std::optional<policy::Topology> topo;
  if (use_topology) {
    auto t = read_topology(g.paths());
    if (t) {
      topo = std::move(*t);
    } else {
      std::cerr << "kvtierctl config check: cannot read the NUMA topology (" << t.error().message
                << "): node ids not checked\n";
    }
  }
  auto compiled = policy::load_compiled_config(file, topo ? &*topo : nullptr);
  if (!compiled) {
    const policy::ConfigProblems& problems = compiled.error();
    for (const auto& line : policy::problem_lines(problems)) std::cerr << line << '\n';
    std::cerr << fmt::format("{}: {} problem(s)\n", file, problems.size());
    return kExitFailed;
  }
  const policy::Config& cfg = compiled->config;
  std::cout << fmt::format("{}: OK\n", file);
  std::vector<std::string_view> use;
  use.reserve(cfg.sources.use.size());
  for (auto s : cfg.sources.use) use.push_back(policy::source_name(s));
  std::cout << fmt::format(
      "  interval {}, mover {}, migrate {}/s (burst {}), cxl_fill_max {:.0f}%, min_free {}\n",
      policy::format_duration(cfg.daemon.interval), policy::mover_name(cfg.mover.kind),
      policy::format_size(cfg.limits.migrate_rate), policy::format_size(cfg.limits.migrate_burst),
      cfg.limits.cxl_fill_max * 100, policy::format_size(cfg.limits.min_free));
  std::cout << fmt::format(
      "  sources: {}\n",
      cfg.sources.force ? fmt::format("forced {}", policy::source_name(*cfg.sources.force))
                        : fmt::format("use {} (each the host supports)", fmt::join(use, ", ")));
  for (const auto& cg : compiled->match_order) {
    const policy::GroupConfig& grp = cfg.groups[cg.index];
    const auto& p = grp.policy;
    std::vector<std::string> rules;
    if (p.cold_age) rules.push_back("cold_age " + policy::format_duration(*p.cold_age));
    if (p.dram_limit) rules.push_back("dram_limit " + policy::format_size(*p.dram_limit));
    if (p.keep_free) rules.push_back("keep_free " + policy::format_size(*p.keep_free));
    if (p.promote) rules.push_back(fmt::format("promote above {}/s", p.promote_heat));
    std::cout << fmt::format("  group {} (priority {}): demote to {}; {}\n", grp.name, grp.priority,
                             demotion_text(grp, topo), fmt::join(rules, ", "));
  }
  return kExitOk;
}

}  // namespace

void add_config_command(CLI::App& app, Globals& g) {
  auto* config = app.add_subcommand("config", "Work with kvtier's configuration file");
  config->require_subcommand(1);
  auto file = std::make_shared<std::string>();
  auto no_topology = std::make_shared<bool>(false);
  auto* check_cmd = config->add_subcommand(
      "check",
      "Check a config file exactly as kvtierd would load it: print every problem as "
      "FILE:LINE: KEY: what is wrong (allowed: ...) and exit 1, or print a summary and exit 0");
  check_cmd->add_option("FILE", *file, "The TOML file, e.g. /etc/kvtier/kvtier.toml")->required();
  check_cmd->add_flag("--no-topology", *no_topology,
                      "Do not check node ids against this host's NUMA nodes (or --root's)");
  check_cmd->callback([&g, file, no_topology] { g.exit_code = check(*file, !*no_topology, g); });
}

}  // namespace kvtier::agent::ctl
