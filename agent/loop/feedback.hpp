#pragma once
// The groups' mis-demotion feedback (LoopState::feedback): what the heat tables
// learnt about demoted pages, what kvtier and the kernel moved, the promotion
// latency, and the cold-age tuner's step; exported as metrics each step.

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

#include "agent/loop/loop_state.hpp"
#include "agent/telemetry/telemetry.hpp"
#include "policy/rules.hpp"
#include "policy/topology.hpp"

namespace kvtier::agent {

// Whether `node` is slow for `group`: a node without CPUs, or the group's own demotion node.
[[nodiscard]] bool slow_for(const LoopState& s, const policy::NodeFacts& facts, std::size_t group,
                            int node);

class Feedback {
 public:
  explicit Feedback(LoopState& state) : s_(state) {}
  // One GroupFeedback per group of the config now, from zero.
  void reset();
  // What the heat table learnt about demoted pages this step; pages the kernel
  // promoted no longer wait for kvtier, and their wait goes into the promotion
  // latency as the kernel's: from the first sample on the slow node to the
  // residency read that found them in DRAM (the kernel promotes in the fault
  // path, so that is an upper bound, about one promotion tick over).
  void take_heat_events(Target& t, TimeNs now, Telemetry& telemetry);
  // Bytes kvtier moved for `t` (a demotion or a promotion); a promotion ends the
  // wait of the pages accessed on the slow node (kvtier's promotion latency).
  void moved(Target& t, std::span<const AddrRange> ranges, bool demotion, std::uint64_t bytes,
             TimeNs now, Telemetry& telemetry);
  // The end of a step: the tuners see what it demoted and found mis-demoted,
  // and the totals go out as metrics.
  void end_step(TimeNs now, Telemetry& telemetry);
  // While on, kvtier's promotions count as promotions by co-access group
  // (GroupFeedback::group_promoted_bytes), not as promoted_bytes.
  void promoting_by_group(bool on) { by_group_ = on; }

 private:
  void export_metrics(Telemetry& telemetry) const;

  LoopState& s_;
  bool by_group_ = false;
};

// One promotion into kvtier_promotion_latency_seconds{by}: "kvtier" or "kernel".
void observe_promotion(Telemetry& telemetry, std::string_view by, TimeNs now, TimeNs first_touch);

}  // namespace kvtier::agent
