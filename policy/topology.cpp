#include "policy/topology.hpp"

#include <fmt/format.h>
#include <algorithm>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <utility>
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

namespace {

bool is_target(const std::vector<NodeRole>& roles, int node) {
  return std::ranges::any_of(
      roles, [&](const NodeRole& r) { return r.node == node && r.demotion_target; });
}

std::uint64_t mib(std::uint64_t bytes) {
  return bytes >> 20;
}

// The change of one node present after, or nullopt.
std::optional<TopologyChange> node_change(const Topology& before,
                                          const std::vector<NodeRole>& roles_before,
                                          const NumaNode& node, const NodeRole& role) {
  TopologyChange c{.node = node.id, .demotion_target = role.demotion_target, .reason = role.reason};
  const NumaNode* old = before.find(node.id);
  const std::string now_is = role.demotion_target ? "a demotion target" : "not a demotion target";
  if (old == nullptr) {
    c.line = fmt::format("node {} appeared ({} MiB): {} ({})", node.id, mib(node.mem_total_bytes),
                         now_is, role.reason);
    return c;
  }
  const bool was = is_target(roles_before, node.id);
  const std::string memory = fmt::format("memory online {} -> {} MiB", mib(old->mem_total_bytes),
                                         mib(node.mem_total_bytes));
  if (was && !role.demotion_target) {
    c.lost_target = true;
    c.line = fmt::format(
        "node {} is no longer a demotion target ({}; {}): kvtier demotes nothing "
        "there until it is one again",
        node.id, memory, role.reason);
  } else if (!was && role.demotion_target) {
    c.line =
        fmt::format("node {} is a demotion target again ({}; {})", node.id, memory, role.reason);
  } else if (mib(old->mem_total_bytes) != mib(node.mem_total_bytes)) {
    c.line = fmt::format("node {}: {}; {} ({})", node.id, memory, now_is, role.reason);
  } else {
    return std::nullopt;
  }
  return c;
}

}  // namespace

std::vector<TopologyChange> topology_changes(const Topology& before, const Topology& after) {
  std::vector<TopologyChange> out;
  if (before.nodes.empty()) return out;
  const std::vector<NodeRole> roles_before = classify_nodes(before);
  for (const auto& role : classify_nodes(after)) {
    if (auto c = node_change(before, roles_before, *after.find(role.node), role)) {
      out.push_back(std::move(*c));
    }
  }
  for (const auto& old : before.nodes) {
    if (after.find(old.id) != nullptr) continue;
    const bool was = is_target(roles_before, old.id);
    out.push_back(TopologyChange{
        .node = old.id,
        .lost_target = was,
        .reason = "not online",
        .line =
            fmt::format("node {} went offline ({} MiB){}", old.id, mib(old.mem_total_bytes),
                        was ? ": it was a demotion target; kvtier demotes nothing there" : "")});
  }
  return out;
}

}  // namespace kvtier::policy
