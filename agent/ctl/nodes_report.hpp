#pragma once
// How `kvtierctl nodes` shows the topology: a table for people, JSON for scripts.

#include <nlohmann/json.hpp>
#include <string>

#include "policy/topology.hpp"

namespace kvtier::agent {

nlohmann::json nodes_json(const policy::Topology& topo);
std::string nodes_table(const policy::Topology& topo);

}  // namespace kvtier::agent
