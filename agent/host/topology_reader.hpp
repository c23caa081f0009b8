#pragma once
// Reads the NUMA topology from sysfs (under HostPaths::sys).

#include <cstdint>
#include <string_view>
#include <vector>

#include "agent/host/host_paths.hpp"
#include "policy/error.hpp"
#include "policy/topology.hpp"

namespace kvtier::agent {

// Nodes from devices/system/node (online list, cpulist, meminfo, distance,
// access0/initiators) and memory tiers from devices/virtual/memory_tiering.
// Missing optional parts (HMAT, tiers) are left empty; a missing or malformed
// required file is an error naming it.
Result<policy::Topology> read_topology(const HostPaths& paths);

// The parsers behind it, text in (for tests and fuzzing); `what` names the file.
// "Node 0 MemTotal:       24609592 kB" -> bytes of the named field.
Result<std::uint64_t> parse_meminfo_field(std::string_view text, std::string_view field,
                                          std::string_view what);
// "10 20" -> {10, 20}: positive numbers.
Result<std::vector<int>> parse_distances(std::string_view text, std::string_view what);

}  // namespace kvtier::agent
