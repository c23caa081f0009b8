#pragma once
// The plan phase: what the planner sees now (policy::Snapshot: the topology of
// the last read, every target's heat table, the token bucket refilled, the
// groups' effective cold ages) and policy::plan over it, into the LoopState's
// last plan and spare, each target's last moves, the recording and telemetry.
// The promotion tick and promotion by co-access group plan from the same
// snapshot.

#include "agent/loop/loop_state.hpp"
#include "agent/loop/recorder.hpp"
#include "agent/telemetry/telemetry.hpp"
#include "policy/budget.hpp"
#include "policy/planner.hpp"

namespace kvtier::agent {

class PlanPhase {
 public:
  PlanPhase(LoopState& state, policy::TokenBucket& bucket, Recorder& recorder)
      : s_(state), bucket_(bucket), recorder_(recorder) {}
  // What the planner sees now; the bucket is refilled first.
  [[nodiscard]] policy::Snapshot snapshot(TimeNs now);
  // The plan phase: LoopState::last_plan, its spare and each target's last moves.
  void plan(TimeNs now, Telemetry& telemetry);

 private:
  LoopState& s_;
  policy::TokenBucket& bucket_;
  Recorder& recorder_;
};

}  // namespace kvtier::agent
