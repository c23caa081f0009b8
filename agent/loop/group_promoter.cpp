#include "agent/loop/group_promoter.hpp"

#include <spdlog/spdlog.h>

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "agent/loop/dispatcher.hpp"
#include "agent/loop/feedback.hpp"
#include "agent/loop/loop_state.hpp"
#include "agent/loop/plan_phase.hpp"
#include "agent/loop/target_set.hpp"
#include "agent/movers/mover.hpp"
#include "agent/sources/return_watch.hpp"
#include "agent/telemetry/telemetry.hpp"
#include "policy/coaccess.hpp"
#include "policy/heat.hpp"
#include "policy/planner.hpp"
#include "policy/rules.hpp"
#include "policy/types.hpp"

namespace kvtier::agent {

void GroupPromoter::touch(Pid pid, std::uint64_t page, TimeNs time, TimeNs rearm) {
  auto& groups = by_pid_[pid];
  if (auto id = groups.touch(page, time, rearm)) triggers_.push_back({.pid = pid, .id = *id});
}

policy::CoAccessGroups* GroupPromoter::find(Pid pid) {
  auto it = by_pid_.find(pid);
  return it == by_pid_.end() ? nullptr : &it->second;
}

void GroupPromoter::settle(LoopState& s, TimeNs now) {
  for (auto& f : s.feedback) f.groups_known = f.groups_memory_bytes = 0;
  for (auto it = by_pid_.begin(); it != by_pid_.end();) {
    const Target* t = s.targets.find(it->first);
    if (t == nullptr || t->group >= s.feedback.size()) {
      it = by_pid_.erase(it);
      continue;
    }
    policy::CoAccessGroups& groups = it->second;
    groups.settle(now);
    GroupFeedback& fb = s.feedback[t->group];
    const policy::GroupJudged j = groups.take_judged();
    const bool was_on = fb.group_rate.on();
    fb.group_rate.add(j);
    fb.group_hit_bytes += j.hit_bytes;
    fb.group_wasted_bytes += j.wasted_bytes;
    if (was_on != fb.group_rate.on()) {
      spdlog::info(
          "group {}: promotion by co-access group {}: {:.0f}% of the bytes at stake hit "
          "lately, against group_hit_rate_min {:.0f}%{}",
          s.config.config.groups[t->group].name, was_on ? "off" : "on again",
          100 * fb.group_rate.rate(), 100 * fb.group_rate.min_rate(),
          was_on ? " (trials go on without moving anything)" : "");
    }
    std::uint64_t tracked = 0;
    for (const AddrRange& v : t->vmas) tracked += v.bytes();
    groups.trim(now, tracked / kPageSize);  // one byte per tracked 4 KiB page
    fb.groups_known += groups.size();
    fb.groups_memory_bytes += groups.memory_bytes();
    ++it;
  }
}

void export_group_promotion(const GroupFeedback& f, const std::string& group,
                            Telemetry& telemetry) {
  const auto d = [](std::uint64_t v) { return static_cast<double>(v); };
  telemetry.set("kvtier_promoted_bytes_total", {{"group", group}, {"by", "group"}},
                d(f.group_promoted_bytes));
  telemetry.set("kvtier_group_promotion_bytes_total", {{"group", group}, {"result", "hit"}},
                d(f.group_hit_bytes));
  telemetry.set("kvtier_group_promotion_bytes_total", {{"group", group}, {"result", "wasted"}},
                d(f.group_wasted_bytes));
  telemetry.set("kvtier_group_promotion_hit_rate", {{"group", group}}, f.group_rate.rate());
  telemetry.set("kvtier_group_promotion_on", {{"group", group}}, f.group_rate.on() ? 1 : 0);
  telemetry.set("kvtier_coaccess_groups", {{"group", group}}, d(f.groups_known));
}

// Each group triggered is promoted within the budget and the room (never making
// room: no spare is exchanged for them), each but its witness, which stays on
// the slow node to judge the trial; while the group's hit rate is below
// group_hit_rate_min, or nothing may move, the trial runs in the shadow.
void GroupPromoter::promote(TimeNs now, Telemetry& telemetry, Mover* mover, ReturnWatch* watch) {
  LoopState& s = p_.state;
  settle(s, now);
  const std::vector<Trigger> triggers = take_triggers();
  if (triggers.empty()) return;
  const policy::NodeFacts facts(s.topology);
  for (const auto& trig : triggers) {
    Target* t = s.targets.find(trig.pid);
    policy::CoAccessGroups* co = find(trig.pid);
    if (t == nullptr || co == nullptr || t->group >= s.feedback.size()) continue;
    GroupFeedback& fb = s.feedback[t->group];
    policy::Snapshot snap = p_.plan.snapshot(now);
    std::size_t index = 0;
    while (index < snap.targets.size() && snap.targets[index].pid != trig.pid) ++index;
    if (index == snap.targets.size()) continue;
    const std::uint64_t witness = co->witness(trig.id);
    std::vector<policy::PromotionCandidate> cands;
    std::uint64_t bytes = 0;
    for (const AddrRange& r : co->ranges(trig.id)) {
      for (std::uint64_t a = r.start; a < r.end;) {
        const auto u = t->heat->at(a, now);
        if (!u) break;
        a = u->range.end;
        if (u->range.contains(witness) || !slow_for(s, facts, t->group, u->node)) continue;
        bytes += u->range.bytes();
        cands.push_back({.target = index, .unit = *u, .by_group = true});
      }
    }
    if (bytes == 0) continue;
    const TimeNs deadline = now + fb.tuner.effective();
    if (mover == nullptr || !fb.group_rate.on()) {
      co->start_trial(trig.id, bytes, deadline);
      ++fb.group_shadow_trials;
      continue;
    }
    const Plan p = policy::plan_promotions(snap, cands);
    const std::uint64_t before = fb.group_promoted_bytes;
    p_.feedback.promoting_by_group(true);
    p_.dispatcher.dispatch(*mover, p.moves, now, telemetry, watch);
    p_.feedback.promoting_by_group(false);
    if (fb.group_promoted_bytes > before) {
      co->start_trial(trig.id, fb.group_promoted_bytes - before, deadline);
      ++fb.group_trials;
    }
  }
}

}  // namespace kvtier::agent
