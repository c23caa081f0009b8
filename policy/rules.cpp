#include "policy/rules.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <optional>
#include <span>
#include <string>

#include "policy/config.hpp"
#include "policy/heat.hpp"
#include "policy/heat_state.hpp"
#include "policy/pinned.hpp"
#include "policy/topology.hpp"
#include "policy/types.hpp"
#include "policy/units.hpp"

namespace kvtier::policy {

NodeFacts::NodeFacts(const Topology& topo) {
  int max_id = -1;
  for (const auto& n : topo.nodes) max_id = std::max(max_id, n.id);
  const std::size_t size = max_id < 0 ? 0 : static_cast<std::size_t>(max_id) + 1;
  present_.assign(size, 0);
  slow_.assign(size, 0);
  demote_to_.assign(size, -1);
  for (const auto& n : topo.nodes) {
    present_[index(n.id)] = 1;
    demote_to_[index(n.id)] = preferred_demotion_target(topo, n.id).value_or(-1);
  }
  for (const auto& role : classify_nodes(topo)) {
    if (role.demotion_target && in_range(role.node)) slow_[index(role.node)] = 1;
  }
}

namespace {

std::uint32_t ceil_ticks(TimeNs t) {
  return static_cast<std::uint32_t>((t + kTickNs - 1) / kTickNs);
}

}  // namespace

GroupRules::GroupRules(const GroupConfig& group, const NodeFacts& nodes, TimeNs now,
                       std::optional<TimeNs> cold_age)
    : name_(group.name),
      policy_(group.policy),
      now_(now),
      now_tick_(to_tick(now)),
      residence_ticks_(ceil_ticks(group.policy.min_residence)),
      demote_heat_(static_cast<float>(group.policy.demote_heat)),
      promote_heat_(static_cast<float>(group.policy.promote_heat)),
      cold_on_(group.policy.cold_age.has_value()),
      promote_(group.policy.promote),
      watermark_(group.policy.dram_limit.has_value() || group.policy.keep_free.has_value()),
      exclude_(group.policy.exclude) {
  if (cold_on_) {
    cold_ticks_ = ceil_ticks(*group.policy.cold_age);
    effective_ticks_ = std::max(cold_ticks_, cold_age ? ceil_ticks(*cold_age) : cold_ticks_);
    unseen_ticks_ = std::max(effective_ticks_, 2 * cold_ticks_);
    policy_.cold_age = from_tick(effective_ticks_);
  }
  std::ranges::sort(exclude_, {}, &AddrRange::start);
  const std::optional<int> own = group.demotion_node;
  const std::size_t n = nodes.size();
  present_.assign(n, 0);
  slow_.assign(n, 0);
  demote_to_.assign(n, -1);
  for (std::size_t i = 0; i < n; ++i) {
    const int id = static_cast<int>(i);
    if (!nodes.present(id)) continue;
    present_[i] = 1;
    slow_[i] = nodes.slow(id) || (own && *own == id) ? 1 : 0;
    // The group's own demotion node, when it names one, else the node's nearest target.
    if (own) {
      demote_to_[i] = nodes.present(*own) && *own != id ? *own : -1;
    } else {
      demote_to_[i] = nodes.demote_to(id);
    }
  }
}

bool GroupRules::excluded(AddrRange r) const {
  return overlaps_any(exclude_, r);
}

std::string GroupRules::words(Rule rule, const HeatUnit& u, bool unseen) const {
  const GroupPolicy& pol = policy_;
  const TimeNs last = from_tick(u.last_access);
  const TimeNs idle = now_ > last ? now_ - last : 0;
  const auto dur = [](std::uint32_t ticks) { return format_duration(from_tick(ticks)); };
  switch (rule) {
    case Rule::kUnknownNode:
      return u.node < 0 ? "not resident (never touched, or swapped out): nothing to move"
                        : fmt::format("on node {}, which the topology does not list", u.node);
    case Rule::kExcluded:
      return "excluded by the config: never moved";
    case Rule::kAccessedOnSlow:
      return fmt::format(
          "accessed on the slow node since it was moved there ({}): waiting for migration "
          "budget or DRAM room (see plan notes)",
          u.touched ? "page-level evidence"
          : u.ahead
              ? "never used, just past a page accessed since: the next a growing buffer fills"
              : fmt::format("heat {:.2f}/s >= promote_heat {:.2f}/s", u.heat, pol.promote_heat));
    case Rule::kStaysOnSlow:
      return pol.promote ? fmt::format("cold on the slow node: not accessed since it came, idle {}",
                                       format_duration(idle))
                         : "on the slow node: promotion is off for this group";
    case Rule::kRecentlyMoved:
      return fmt::format("moved less than min_residence {} ago",
                         format_duration(pol.min_residence));
    case Rule::kProtected:
      return fmt::format("mis-demoted {} time(s) in a row: stays until {} after that demotion",
                         u.strikes, dur(protected_until(u) - u.last_moved));
    case Rule::kHot:
      return fmt::format("hot: heat {:.2f}/s > demote_heat {:.2f}/s", u.heat, pol.demote_heat);
    case Rule::kNowhereToDemote:
      return fmt::format(
          "nowhere to demote: node {} has no demotion target and group '{}' names no "
          "demotion_node",
          u.node, name_);
    case Rule::kWarm:
      if (!cold_on_) {
        return watermark_ ? "cold_age is off: demoted only while above dram_limit or keep_free"
                          : "cold_age is off and no dram_limit or keep_free: never demoted";
      }
      return fmt::format("warm: idle {} < cold_age {}{}{}", format_duration(idle), dur(cold_ticks_),
                         u.ahead ? " (never used, just past a page accessed then: the next a "
                                   "growing buffer fills)"
                                 : "",
                         watermark_ ? "; demoted only while above dram_limit or keep_free" : "");
    case Rule::kCooling:
      if (unseen && unseen_ticks_ > effective_ticks_) {
        return fmt::format(
            "cooling: idle {} >= cold_age {} but < {}, twice cold_age: this process's reads "
            "in DRAM go unseen (single-threaded, see kvtierctl status), so its idle time is a "
            "lower bound; demoted only when DRAM has to make room",
            format_duration(idle), dur(cold_ticks_), dur(unseen_ticks_));
      }
      return fmt::format(
          "cooling: idle {} >= cold_age {} but < the effective cold age {} (raised by "
          "mis-demotions): demoted only to keep DRAM headroom",
          format_duration(idle), dur(cold_ticks_), dur(effective_ticks_));
    case Rule::kCold:
      return fmt::format(
          "cold (idle {} >= {}): eligible for demotion to node {}, waiting for budget or the "
          "fill limit (see plan notes)",
          format_duration(idle), dur(cold_after(unseen)), demotion_dest(u.node));
  }
  return "?";
}

Verdict explain_unit(const GroupRules& rules, const HeatUnit& u, std::span<const PlannedMove> moves,
                     bool unseen) {
  Verdict v{.rule = rules.classify(u, unseen)};
  for (const auto& m : moves) {
    if (m.range.start < u.range.end && u.range.start < m.range.end) {
      v.move = &m;
      v.why = fmt::format("moving to node {}: {}", m.to_node, m.why);
      return v;
    }
  }
  v.why = rules.words(v.rule, u, unseen);
  return v;
}

}  // namespace kvtier::policy
