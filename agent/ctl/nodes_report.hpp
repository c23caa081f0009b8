#pragma once
// How `kvtierctl nodes` shows the topology: a table for people, JSON for scripts.

#include <nlohmann/json.hpp>
#include <string>

#include "policy/topology.hpp"

namespace kvtier::agent {

nlohmann::json nodes_json(const policy::Topology& topo);
std::string nodes_table(const policy::Topology& topo);

// The node label a fleet schedules kvtier by (deploy/kubernetes): "kvtier.io/cxl-memory=true"
// when the host has a CPU-less node with memory, else "...=false".
inline constexpr const char* kCxlMemoryLabel = "kvtier.io/cxl-memory";
std::string nodes_label(const policy::Topology& topo);

}  // namespace kvtier::agent
