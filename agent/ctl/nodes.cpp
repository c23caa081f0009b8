#include <iostream>
#include <memory>

#include "agent/ctl/command.hpp"
#include "agent/ctl/nodes_report.hpp"
#include "agent/host/topology_reader.hpp"

namespace kvtier::agent::ctl {

void add_nodes_command(CLI::App& app, Globals& g) {
  auto json = std::make_shared<bool>(false);
  auto label = std::make_shared<bool>(false);
  auto* cmd = app.add_subcommand(
      "nodes",
      "Show NUMA nodes: CPUs, memory, distances, HMAT latency/bandwidth, memory tier, and which "
      "nodes kvtier demotes cold pages to, and why");
  cmd->add_flag("--json", *json, "Print JSON instead of a table");
  cmd->add_flag("--label", *label,
                "Print the node label for a fleet's scheduler: kvtier.io/cxl-memory=true when "
                "this host has a CPU-less node with memory, else =false");
  cmd->callback([&g, json, label] {
    auto topo = read_topology(g.paths());
    if (!topo) {
      std::cerr << "kvtierctl nodes: " << topo.error().message << '\n';
      g.exit_code = kExitFailed;
      return;
    }
    if (*label) {
      std::cout << nodes_label(*topo) << '\n';
    } else if (*json) {
      std::cout << nodes_json(*topo).dump(2) << '\n';
    } else {
      std::cout << nodes_table(*topo);
    }
  });
}

}  // namespace kvtier::agent::ctl
