#pragma once
// Reads the NUMA topology from sysfs (under HostPaths::sys).

#include "agent/host/host_paths.hpp"
#include "policy/error.hpp"
#include "policy/topology.hpp"

namespace kvtier::agent {

// Nodes from devices/system/node (online list, cpulist, meminfo, distance,
// access0/initiators) and memory tiers from devices/virtual/memory_tiering.
// Missing optional parts (HMAT, tiers) are left empty; a missing or malformed
// required file is an error naming it.
Result<policy::Topology> read_topology(const HostPaths& paths);

}  // namespace kvtier::agent
