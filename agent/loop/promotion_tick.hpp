#pragma once
// The promotion tick's own parts (Controller::promote_step, between steps):
// what page-level evidence says was accessed on a slow node, and the last
// step's spare DRAM units that may give way to it.

#include <span>
#include <vector>

#include "agent/loop/feedback.hpp"
#include "agent/loop/loop_state.hpp"
#include "agent/loop/residency_phase.hpp"
#include "agent/telemetry/telemetry.hpp"
#include "policy/planner.hpp"

namespace kvtier::agent {

class PromotionTick {
 public:
  PromotionTick(LoopState& state, ResidencyPhase& residency, Feedback& feedback)
      : s_(state), residency_(residency), feedback_(feedback) {}
  // The units of `snap`'s targets with a page-level touch on a slow node, after
  // the sampled pages' nodes are read again (the kernel may have promoted them).
  std::vector<policy::PromotionCandidate> candidates(const policy::Snapshot& snap, TimeNs now,
                                                     Telemetry& telemetry);
  // The last step's spare as it is now, coldest first, as far as an exchange for
  // the candidates could reach (twice their bytes, plus every DRAM node's
  // headroom); spare units that moved since are dropped from it. `spent`: the
  // spare ran out before that reach.
  std::vector<policy::PromotionCandidate> spare_units(
      const policy::Snapshot& snap, std::span<const policy::PromotionCandidate> cands, TimeNs now,
      bool* spent);

 private:
  LoopState& s_;
  ResidencyPhase& residency_;
  Feedback& feedback_;
};

}  // namespace kvtier::agent
