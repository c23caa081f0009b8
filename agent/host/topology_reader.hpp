#pragma once
// Reads the NUMA topology from sysfs (under HostPaths::sys).

#include <cstdint>
#include <map>
#include <string_view>
#include <vector>

#include "agent/host/host_paths.hpp"
#include "policy/error.hpp"
#include "policy/topology.hpp"

namespace kvtier::agent {

// Nodes from devices/system/node (online list, cpulist, meminfo, distance,
// access0/initiators), memory tiers from devices/virtual/memory_tiering, and
// the free memory below each node's zone watermarks from /proc/zoneinfo
// (NumaNode::mem_reserved_bytes). Missing optional parts (HMAT, tiers,
// zoneinfo) are left empty; a missing or malformed required file, or a
// malformed zoneinfo, is an error naming it.
Result<policy::Topology> read_topology(const HostPaths& paths);

// The memory of the nodes `topo` has (total, free, reserved) read again from
// each node's meminfo and /proc/zoneinfo: 1 + N files where read_topology reads
// about 6N + 4. What a promotion tick needs between the cycle's full reads. An
// error names the file (a node that went offline: read the whole topology).
Result<void> refresh_node_memory(const HostPaths& paths, policy::Topology& topo);

// The parsers behind it, text in (for tests and fuzzing); `what` names the file.
// "Node 0 MemTotal:       24609592 kB" -> bytes of the named field.
Result<std::uint64_t> parse_meminfo_field(std::string_view text, std::string_view field,
                                          std::string_view what);
// /proc/zoneinfo -> node id -> the bytes of its free memory that user pages
// cannot have without the kernel reclaiming first: in each zone, the free pages
// up to its high watermark (plus any watermark boost) plus its lowmem reserve
// against movable allocations (the "protection" entry of the node's Movable
// zone). The kernel promotes a page to a node only while a zone is above that
// (migrate_balanced_pgdat), so free memory counts for kvtier only above it.
Result<std::map<int, std::uint64_t>> parse_zone_reserves(std::string_view text,
                                                         std::uint64_t page_bytes,
                                                         std::string_view what);
// "10 20" -> {10, 20}: positive numbers.
Result<std::vector<int>> parse_distances(std::string_view text, std::string_view what);

}  // namespace kvtier::agent
