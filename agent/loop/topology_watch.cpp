#include "agent/loop/topology_watch.hpp"

#include <spdlog/spdlog.h>

#include "agent/loop/loop_state.hpp"
#include "agent/telemetry/telemetry.hpp"
#include "policy/topology.hpp"
#include "policy/types.hpp"

namespace kvtier::agent {

void note_topology_changes(const policy::Topology& before, LoopState& s, TimeNs now,
                           Telemetry& telemetry) {
  for (const auto& c : policy::topology_changes(before, s.topology)) {
    ++s.topology_changes;
    telemetry.add("kvtier_topology_changes_total", {});
    if (c.lost_target) {
      spdlog::warn("topology: {}", c.line);
      s.lost_targets[c.node] = LoopState::LostTarget{.since = now, .reason = c.reason};
    } else {
      spdlog::info("topology: {}", c.line);
      if (c.demotion_target) s.lost_targets.erase(c.node);
    }
  }
}

}  // namespace kvtier::agent
