#include "agent/loop/plan_phase.hpp"

#include "agent/loop/loop_state.hpp"
#include "agent/loop/recording.hpp"
#include "agent/loop/target_set.hpp"
#include "agent/telemetry/telemetry.hpp"
#include "policy/planner.hpp"
#include "policy/types.hpp"

namespace kvtier::agent {

policy::Snapshot PlanPhase::snapshot(TimeNs now) {
  bucket_.refill(now);
  s_.budget_bytes = bucket_.available();
  policy::Snapshot snap{.topology = &s_.topology,
                        .groups = s_.config.config.groups,
                        .limits = s_.config.config.limits,
                        .now = now,
                        .budget_bytes = s_.budget_bytes,
                        .cold_age = s_.cold_ages(),
                        .fault_path_promotions = s_.fault_path_promotions};
  for (auto& [pid, t] : s_.targets.all()) {
    snap.targets.push_back(policy::TargetView{.pid = pid,
                                              .group = t.group,
                                              .heat = t.heat.get(),
                                              .dram_reads_unseen = s_.dram_reads_unseen(t),
                                              .pinned = t.pinned.active()});
  }
  return snap;
}

void PlanPhase::plan(TimeNs now, Telemetry& telemetry) {
  const policy::Snapshot snap = snapshot(now);
  for (auto& [pid, t] : s_.targets.all()) t.last_moves.clear();
  s_.last_plan = policy::plan(snap, &s_.spare);
  s_.replan_when_spent = !s_.spare.empty();
  recorder_.rec(now, [&] { return RecPlan{.plan = s_.last_plan}; });
  telemetry.record_plan(s_.last_plan);
  for (const auto& m : s_.last_plan.moves) {
    if (Target* t = s_.targets.find(m.pid)) t->last_moves.push_back(m);
  }
}

}  // namespace kvtier::agent
