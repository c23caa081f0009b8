#pragma once
// The NUMA topology kvtier reasons about, and the rule that picks the nodes it
// demotes to. Pure data: agent/topology_reader fills it from sysfs.

#include <algorithm>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace kvtier::policy {

// HMAT access attributes of a memory target, as seen from its nearest initiator
// (sysfs nodeN/access0/initiators/). Latency in nanoseconds, bandwidth in MiB/s.
struct AccessAttrs {
  std::optional<std::uint64_t> read_latency_ns;
  std::optional<std::uint64_t> write_latency_ns;
  std::optional<std::uint64_t> read_bandwidth_mbps;
  std::optional<std::uint64_t> write_bandwidth_mbps;
};

struct NumaNode {
  int id = 0;
  std::vector<int> cpus;
  std::uint64_t mem_total_bytes = 0;
  std::uint64_t mem_free_bytes = 0;
  // Of mem_free_bytes, what the kernel keeps: free pages up to its zones' high
  // watermarks and lowmem reserves (/proc/zoneinfo). A user page, or a promotion
  // in the fault path, gets memory only above them; 0 where unknown.
  std::uint64_t mem_reserved_bytes = 0;
  std::map<int, int> distance;  // to node id -> SLIT distance
  std::optional<AccessAttrs> access;
  // The kernel's memory tier id (memory_tierN); a higher id is a slower tier.
  std::optional<int> memory_tier;

  [[nodiscard]] bool has_cpus() const { return !cpus.empty(); }
  [[nodiscard]] bool has_memory() const { return mem_total_bytes > 0; }
  // Free memory a page moved here can have without the kernel reclaiming first.
  [[nodiscard]] std::uint64_t usable_free_bytes() const {
    return mem_free_bytes - std::min(mem_free_bytes, mem_reserved_bytes);
  }
};

struct Topology {
  std::vector<NumaNode> nodes;  // sorted by id

  [[nodiscard]] const NumaNode* find(int id) const;
};

// Why a node is or is not a place kvtier demotes cold pages to.
struct NodeRole {
  int node = 0;
  bool demotion_target = false;
  std::string reason;
};

// Decides, for every node, whether kvtier would demote to it. A demotion target
// has memory, no CPUs, and sits in a lower memory tier than every CPU node; when
// the kernel exposes no tiers, a larger distance from every CPU node than the
// CPU nodes' own local distance stands in for "lower tier".
std::vector<NodeRole> classify_nodes(const Topology& topo);

// The demotion target nearest to `from` (by distance), if any.
std::optional<int> preferred_demotion_target(const Topology& topo, int from);

// A node whose part changed between two reads of the topology: memory offlined
// or onlined (a memory block, a CXL expander), a node that came or went.
struct TopologyChange {
  int node = 0;
  bool demotion_target = false;  // after the change
  bool lost_target = false;      // a demotion target before, not after
  std::string reason;            // classify_nodes' reason, after
  std::string line;              // one line for the log
};

// What changed from `before` to `after`: a node's role (demotion target or
// not), a node that appeared or went, or its memory online (MemTotal) grown or
// shrunk by at least a MiB. Nothing when `before` has no node (the first read).
std::vector<TopologyChange> topology_changes(const Topology& before, const Topology& after);

}  // namespace kvtier::policy
