#include "agent/loop/feedback.hpp"

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>
#include "agent/loop/group_promoter.hpp"
#include "agent/loop/loop_state.hpp"
#include "agent/loop/target_set.hpp"
#include "agent/telemetry/telemetry.hpp"
#include "policy/heat.hpp"
#include "policy/rules.hpp"
#include "policy/types.hpp"

namespace kvtier::agent {

bool slow_for(const LoopState& s, const policy::NodeFacts& facts, std::size_t group, int node) {
  const auto& own = s.config.config.groups[group].demotion_node;
  return facts.slow(node) || (own && *own == node);
}

void observe_promotion(Telemetry& telemetry, std::string_view by, TimeNs now, TimeNs first_touch) {
  const TimeNs waited = now > first_touch ? now - first_touch : 0;
  telemetry.observe("kvtier_promotion_latency_seconds", {{"by", std::string(by)}},
                    static_cast<double>(waited) / 1e9);
}

void Feedback::reset() {
  s_.feedback.clear();
  for (const auto& g : s_.config.config.groups) s_.feedback.emplace_back(g.policy);
}

void Feedback::take_heat_events(Target& t, TimeNs now, Telemetry& telemetry) {
  const policy::HeatEvents ev = t.heat->take_events();
  GroupFeedback& fb = s_.feedback[t.group];
  fb.misdemoted_bytes += ev.misdemoted_bytes;
  fb.step_misdemoted += ev.misdemoted_bytes;
  fb.reactivated_bytes += ev.reactivated_bytes;
  fb.kernel_promoted_bytes += ev.moved_by_kernel_bytes;
  const policy::NodeFacts facts(s_.topology);
  std::erase_if(t.first_slow_touch, [&](const auto& kv) {
    auto u = t.heat->at(kv.first, now);
    if (!u) return true;  // no longer tracked
    if (slow_for(s_, facts, t.group, u->node)) return false;
    if (u->node >= 0) observe_promotion(telemetry, "kernel", now, kv.second);
    return true;
  });
}

void Feedback::moved(Target& t, std::span<const AddrRange> ranges, bool demotion,
                     std::uint64_t bytes, TimeNs now, Telemetry& telemetry) {
  GroupFeedback& fb = s_.feedback[t.group];
  (demotion ? fb.demoted_bytes : by_group_ ? fb.group_promoted_bytes : fb.promoted_bytes) += bytes;
  if (demotion) {
    fb.step_demoted += bytes;
    return;
  }
  // Promotion latency of kvtier's own: from the first page-level touch on the slow node to the
  // move.
  for (const auto& r : ranges) {
    auto it = t.first_slow_touch.lower_bound(r.start);
    while (it != t.first_slow_touch.end() && it->first < r.end) {
      observe_promotion(telemetry, "kvtier", now, it->second);
      it = t.first_slow_touch.erase(it);
    }
  }
}

void Feedback::end_step(TimeNs now, Telemetry& telemetry) {
  for (GroupFeedback& fb : s_.feedback) {
    fb.tuner.record(now, std::exchange(fb.step_demoted, 0), std::exchange(fb.step_misdemoted, 0));
  }
  export_metrics(telemetry);
}

// The groups' feedback as metrics (totals kept in the loop state, set each step).
void Feedback::export_metrics(Telemetry& telemetry) const {
  for (std::size_t g = 0; g < s_.feedback.size(); ++g) {
    const GroupFeedback& f = s_.feedback[g];
    const std::string& name = s_.config.config.groups[g].name;
    const MetricLabels group{{"group", name}};
    const auto d = [](std::uint64_t v) { return static_cast<double>(v); };
    telemetry.set("kvtier_demoted_bytes_total", group, d(f.demoted_bytes));
    telemetry.set("kvtier_promoted_bytes_total", {{"group", name}, {"by", "kvtier"}},
                  d(f.promoted_bytes));
    telemetry.set("kvtier_promoted_bytes_total", {{"group", name}, {"by", "kernel"}},
                  d(f.kernel_promoted_bytes));
    telemetry.set("kvtier_misdemoted_bytes_total", group, d(f.misdemoted_bytes));
    telemetry.set("kvtier_reactivated_bytes_total", group, d(f.reactivated_bytes));
    telemetry.set("kvtier_slow_tier_touches_total", group, d(f.slow_touches));
    telemetry.set("kvtier_misdemotion_ratio", group, f.tuner.ratio());
    telemetry.set("kvtier_effective_cold_age_seconds", group, d(f.tuner.effective()) / 1e9);
    export_group_promotion(f, name, telemetry);
  }
}

}  // namespace kvtier::agent
