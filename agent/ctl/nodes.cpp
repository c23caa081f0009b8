#include <fmt/format.h>

#include <cstdint>
#include <iostream>
#include <map>
#include <memory>

#include "agent/ctl/command.hpp"
#include "agent/ctl/nodes_report.hpp"
#include "agent/host/pinned_memory.hpp"
#include "agent/host/topology_reader.hpp"
#include "policy/topology.hpp"

namespace kvtier::agent::ctl {
namespace {

// A CPU-less node whose memory is onlined as ZONE_MOVABLE: a long-term pin
// migrates a pool out of it (docs/gpu-servers.md).
void warn_movable(const policy::Topology& topo, const std::map<int, std::uint64_t>& movable) {
  for (const auto& n : topo.nodes) {
    auto it = movable.find(n.id);
    if (n.has_cpus() || it == movable.end()) continue;
    fmt::print(
        "warning: node {}: {} MiB of its memory is ZONE_MOVABLE: a long-term pin "
        "(cudaHostRegister, "
        "RDMA, io_uring buffers) migrates pages out of it, so a pinned KV pool cannot stay there; "
        "online it as normal memory (daxctl reconfigure-device --mode=system-ram --no-movable "
        "DEVICE, or daxctl online-memory --no-movable DEVICE) if pools are to be pinned there "
        "(docs/gpu-servers.md)\n",
        n.id, it->second >> 20);
  }
}

}  // namespace

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
      warn_movable(*topo, read_movable_zones(g.paths()));
    }
  });
}

}  // namespace kvtier::agent::ctl
