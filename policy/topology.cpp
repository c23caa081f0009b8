#include "policy/topology.hpp"

#include <fmt/format.h>
#include <algorithm>
#include <limits>
#include <optional>
#include <vector>

namespace kvtier::policy {

const NumaNode* Topology::find(int id) const {
  auto it = std::ranges::find(nodes, id, &NumaNode::id);
  return it == nodes.end() ? nullptr : &*it;
}

namespace {

int distance_between(const NumaNode& from, int to) {
  auto it = from.distance.find(to);
  return it == from.distance.end() ? std::numeric_limits<int>::max() : it->second;
}

NodeRole classify_one(const Topology& topo, const NumaNode& node) {
  NodeRole role{.node = node.id};
  if (node.has_cpus()) {
    role.reason = fmt::format("has CPUs ({}): inference threads run here", node.cpus.size());
    return role;
  }
  if (!node.has_memory()) {
    role.reason = "no memory online";
    return role;
  }

  std::vector<const NumaNode*> cpu_nodes;
  for (const auto& n : topo.nodes) {
    if (n.has_cpus()) cpu_nodes.push_back(&n);
  }
  if (cpu_nodes.empty()) {
    role.reason = "no node has CPUs: cannot tell fast memory from slow";
    return role;
  }

  const bool tiers_known =
      node.memory_tier.has_value() &&
      std::ranges::all_of(cpu_nodes, [](const NumaNode* n) { return n->memory_tier.has_value(); });
  if (tiers_known) {
    int slowest_cpu_tier = 0;
    for (const auto* n : cpu_nodes) slowest_cpu_tier = std::max(slowest_cpu_tier, *n->memory_tier);
    if (*node.memory_tier > slowest_cpu_tier) {
      role.demotion_target = true;
      role.reason = fmt::format("CPU-less, memory_tier{} is below the CPU nodes' memory_tier{}",
                                *node.memory_tier, slowest_cpu_tier);
    } else {
      role.reason =
          fmt::format("CPU-less but in memory_tier{}, not below the CPU nodes' memory_tier{}",
                      *node.memory_tier, slowest_cpu_tier);
    }
    return role;
  }

  // No tier information: fall back to SLIT distances.
  int nearest = std::numeric_limits<int>::max();
  int local = 0;
  for (const auto* n : cpu_nodes) {
    nearest = std::min(nearest, distance_between(*n, node.id));
    local = std::max(local, distance_between(*n, n->id));
  }
  if (nearest == std::numeric_limits<int>::max()) {
    role.reason = "CPU-less, but no distance from any CPU node is known";
  } else if (nearest > local) {
    role.demotion_target = true;
    role.reason = fmt::format(
        "CPU-less, no memory tier information; distance {} from the nearest CPU node exceeds local "
        "{}",
        nearest, local);
  } else {
    role.reason = fmt::format("CPU-less but as near as local memory (distance {})", nearest);
  }
  return role;
}

}  // namespace

std::vector<NodeRole> classify_nodes(const Topology& topo) {
  std::vector<NodeRole> roles;
  roles.reserve(topo.nodes.size());
  for (const auto& node : topo.nodes) roles.push_back(classify_one(topo, node));
  return roles;
}

std::optional<int> preferred_demotion_target(const Topology& topo, int from) {
  const NumaNode* src = topo.find(from);
  if (src == nullptr) return std::nullopt;
  std::optional<int> best;
  int best_distance = std::numeric_limits<int>::max();
  for (const auto& role : classify_nodes(topo)) {
    if (!role.demotion_target) continue;
    const int d = distance_between(*src, role.node);
    if (!best || d < best_distance) {
      best = role.node;
      best_distance = d;
    }
  }
  return best;
}

}  // namespace kvtier::policy
