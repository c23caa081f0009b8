#pragma once
// The topology at run time: what changed between the loop's reads of it (memory
// blocks offlined or onlined, a CXL expander added, a node gone), said once in
// the log and kept in the loop's state for status and the metrics. The planner
// needs nothing of it: it demotes only to the nodes the last read classifies as
// demotion targets (policy::classify_nodes), so a node without memory online
// gets nothing from the step that reads it so, and one onlined again gets pages
// from the step that reads it back.

#include "agent/loop/loop_state.hpp"
#include "agent/telemetry/telemetry.hpp"
#include "policy/topology.hpp"
#include "policy/types.hpp"

namespace kvtier::agent {

// Compares `before` (the last read) with s.topology (this one): one log line
// per change, s.lost_targets and s.topology_changes updated, the counter
// kvtier_topology_changes_total raised.
void note_topology_changes(const policy::Topology& before, LoopState& s, TimeNs now,
                           Telemetry& telemetry);

}  // namespace kvtier::agent
