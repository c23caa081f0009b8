#pragma once
// The control loop's state, as its views (views.hpp) read it: the config, the
// topology of the last step, the targets, the sources and the mover, the
// budget, the last plan and what moved. The Controller writes it; everything
// else only reads it.

#include <cstdint>
#include <string>
#include <vector>

#include "agent/daemon/target_set.hpp"
#include "policy/config.hpp"
#include "policy/topology.hpp"
#include "policy/types.hpp"

namespace kvtier::agent {

// One hotness source the loop runs.
struct SourceStatus {
  SourceKind kind = SourceKind::kPmu;
  std::string reason;  // why it runs (the registry's one line)
  bool started = false;
  std::string error;  // the last start, set_targets or collect error; "" when none
};

struct LoopState {
  LoopState(policy::CompiledConfig cfg, TargetSet set)
      : config(std::move(cfg)), targets(std::move(set)) {}

  policy::CompiledConfig config;
  policy::Topology topology;  // as read at the last step
  TargetSet targets;
  std::vector<SourceStatus> sources;  // empty: no source could run, heat is unknown
  std::string mover;                  // its name; empty: observe-only
  std::string observe_reason;
  std::uint64_t budget_bytes = 0;  // what the token bucket holds after the last step
  std::uint64_t steps = 0;
  Plan last_plan;
  MoveStats moved_total;
};

}  // namespace kvtier::agent
