#include <iostream>
#include <memory>

#include "agent/ctl/command.hpp"
#include "agent/ctl/nodes_report.hpp"
#include "agent/host/topology_reader.hpp"

namespace kvtier::agent::ctl {

void add_nodes_command(CLI::App& app, Globals& g) {
  auto json = std::make_shared<bool>(false);
  auto* cmd = app.add_subcommand(
      "nodes",
      "Show NUMA nodes: CPUs, memory, distances, HMAT latency/bandwidth, memory tier, and which "
      "nodes kvtier demotes cold pages to, and why");
  cmd->add_flag("--json", *json, "Print JSON instead of a table");
  cmd->callback([&g, json] {
    auto topo = read_topology(g.paths());
    if (!topo) {
      std::cerr << "kvtierctl nodes: " << topo.error().message << '\n';
      g.exit_code = kExitFailed;
      return;
    }
    if (*json) {
      std::cout << nodes_json(*topo).dump(2) << '\n';
    } else {
      std::cout << nodes_table(*topo);
    }
  });
}

}  // namespace kvtier::agent::ctl
