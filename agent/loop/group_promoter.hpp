#pragma once
// Promotion by co-access group (issue 36): the loop's side of
// policy/coaccess.hpp. Each target's groups learn from its page-level touches
// on a slow node (touch(), from the sources phase); a touch that triggers a
// known group is kept until the loop promotes the group (promote(), after the
// step's or the promotion tick's moves); the trials' verdicts go into the
// group's GroupFeedback (settle()).

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "agent/loop/dispatcher.hpp"
#include "agent/loop/feedback.hpp"
#include "agent/loop/loop_state.hpp"
#include "agent/loop/plan_phase.hpp"
#include "agent/movers/mover.hpp"
#include "agent/sources/return_watch.hpp"
#include "agent/telemetry/telemetry.hpp"
#include "policy/coaccess.hpp"
#include "policy/types.hpp"

namespace kvtier::agent {

class GroupPromoter {
 public:
  struct Trigger {
    Pid pid = 0;
    policy::CoGroupId id = 0;
  };
  struct Parts {
    LoopState& state;
    PlanPhase& plan;  // the snapshot the groups' promotions are planned from
    Dispatcher& dispatcher;
    Feedback& feedback;
  };
  explicit GroupPromoter(Parts parts) : p_(parts) {}

  // A page-level touch of `page` of target `pid` on a slow node at `time`; a
  // group it triggers (its first touch since `rearm`) waits in take_triggers().
  void touch(Pid pid, std::uint64_t page, TimeNs time, TimeNs rearm);
  // Closes episodes and judges trials, into each target's group's feedback
  // (GroupFeedback::group_*), keeps each target's groups within one byte per
  // tracked 4 KiB page, and drops the groups of targets gone.
  void settle(LoopState& s, TimeNs now);
  // The groups triggered since the last call, promoted by `mover` (null: nothing
  // may move now, so the trials run in the shadow), after the step's or the
  // tick's own moves. `watch`: the dispatch's return watch (null: none).
  void promote(TimeNs now, Telemetry& telemetry, Mover* mover, ReturnWatch* watch);

 private:
  std::vector<Trigger> take_triggers() { return std::exchange(triggers_, {}); }
  [[nodiscard]] policy::CoAccessGroups* find(Pid pid);

  Parts p_;
  std::map<Pid, policy::CoAccessGroups> by_pid_;
  std::vector<Trigger> triggers_;
};

// One group's promotion by co-access group as metrics:
// kvtier_promoted_bytes_total{by="group"}, kvtier_group_promotion_bytes_total{result}
// (hit, wasted), kvtier_group_promotion_hit_rate, kvtier_group_promotion_on,
// kvtier_coaccess_groups.
void export_group_promotion(const GroupFeedback& f, const std::string& group, Telemetry& telemetry);

}  // namespace kvtier::agent
