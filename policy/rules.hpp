#pragma once
// The keep/move rules, in one place. For one unit of a target's memory (a
// page, a huge page or a region, as HeatTable::for_each_unit shows it) in one
// group, on one node, now: which rule applies. The planner decides with
// classify() and then ranks the candidates against the budget and the limits;
// `kvtierctl explain` words the same verdict with explain_unit(), so the two
// never disagree (tests/unit/planner_property_test.cpp checks it unit by unit).

#include <algorithm>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "policy/config.hpp"
#include "policy/heat.hpp"
#include "policy/heat_state.hpp"
#include "policy/topology.hpp"
#include "policy/types.hpp"

namespace kvtier::policy {

// The rule that applies to a unit, in the order classify() tries them.
enum class Rule : std::uint8_t {
  kUnknownNode,      // not resident (never touched, swapped out) or on an unknown node
  kExcluded,         // in a range the config excludes: never moved
  kAccessedOnSlow,   // on a slow node and accessed since it got there (page-level
                     // evidence), never used and just past a page accessed since
                     // (HeatUnit::ahead: the next a growing buffer fills), or
                     // heat >= promote_heat: a promotion candidate
  kStaysOnSlow,      // on a slow node, not accessed since (or promotion off)
  kRecentlyMoved,    // on a fast node, moved here less than min_residence ago: stays
  kProtected,        // on a fast node, mis-demoted lately: stays for a while that
                     // doubles with every mis-demotion in a row
  kHot,              // on a fast node, heat > demote_heat: stays
  kNowhereToDemote,  // on a fast node that has no demotion node for this group
  kWarm,             // on a fast node, idle < cold_age (a never-used page just past
                     // an access counts as accessed with it: HeatParams::frontier_bytes):
                     // demoted only under the group's own limits (dram_limit, keep_free)
  kCooling,          // on a fast node, cold_age <= idle < the effective cold age (raised
                     // by mis-demotions; at least twice cold_age for a target whose DRAM
                     // reads go unseen): demoted only to keep DRAM headroom
  kCold,             // on a fast node, idle >= the effective cold age: demoted, coldest
                     // first
};

// What the rules need to know about the nodes: which exist, which are
// demotion targets (slow), and where each demotes to by default.
class NodeFacts {
 public:
  explicit NodeFacts(const Topology& topo);
  [[nodiscard]] bool present(int id) const { return in_range(id) && present_[index(id)] != 0; }
  [[nodiscard]] bool slow(int id) const { return in_range(id) && slow_[index(id)] != 0; }
  // preferred_demotion_target(); -1: none.
  [[nodiscard]] int demote_to(int id) const { return in_range(id) ? demote_to_[index(id)] : -1; }
  [[nodiscard]] std::size_t size() const { return present_.size(); }

 private:
  [[nodiscard]] bool in_range(int id) const { return id >= 0 && index(id) < present_.size(); }
  static std::size_t index(int id) { return static_cast<std::size_t>(id); }
  std::vector<std::int8_t> present_;
  std::vector<std::int8_t> slow_;
  std::vector<int> demote_to_;
};

// One group's rules at one moment, with what every unit needs precomputed:
// the planner calls classify() for every page.
class GroupRules {
 public:
  // `cold_age`: the group's effective cold age now (policy.cold_age raised by the
  // mis-demotion feedback; never below it); nullopt: the configured one.
  GroupRules(const GroupConfig& group, const NodeFacts& nodes, TimeNs now,
             std::optional<TimeNs> cold_age = std::nullopt);

  // `unseen`: the unit's target's reads in DRAM go unseen (TargetView::dram_reads_unseen).
  [[nodiscard, gnu::always_inline]] Rule classify(const HeatUnit& u, bool unseen = false) const {
    const auto id = static_cast<std::size_t>(u.node);  // -1 wraps: unknown
    if (id >= slow_.size() || present_[id] == 0) return Rule::kUnknownNode;
    if (!exclude_.empty() && excluded(u.range)) return Rule::kExcluded;
    if (slow_[id] != 0) {
      const bool accessed = u.touched || u.ahead || u.heat >= promote_heat_;
      return promote_ && accessed ? Rule::kAccessedOnSlow : Rule::kStaysOnSlow;
    }
    if (u.last_moved != 0 && now_tick_ - std::min(now_tick_, u.last_moved) < residence_ticks_) {
      return Rule::kRecentlyMoved;
    }
    if (u.strikes > 0 && now_tick_ < protected_until(u)) return Rule::kProtected;
    if (u.heat > demote_heat_) return Rule::kHot;
    if (demote_to_[id] < 0) return Rule::kNowhereToDemote;
    if (!cold_on_) return Rule::kWarm;
    const std::uint32_t idle = now_tick_ - std::min(now_tick_, u.last_access);
    if (idle < cold_ticks_) return Rule::kWarm;
    return idle < cold_after(unseen) ? Rule::kCooling : Rule::kCold;
  }

  // Whether classify() gives none of a chunk's pages a rule the planner's scan
  // keeps (kCold, kCooling, kAccessedOnSlow, and kWarm when `take_warm` or
  // exchangeable), from the chunk's bounds alone (PagePack: every page on
  // `node`, none accessed before `earliest_access`, none with a heat above
  // `heat_bound` (decay only lowers it), `flags_any` their flags or'ed). True
  // only when that holds for every page whatever else it has; false when the
  // pages have to be looked at.
  [[nodiscard]] bool yields_none(int node, std::uint32_t earliest_access, float heat_bound,
                                 std::uint16_t flags_any, bool take_warm) const {
    const auto id = static_cast<std::size_t>(node);            // -1 wraps: unknown
    if (id >= slow_.size() || present_[id] == 0) return true;  // kUnknownNode
    if (slow_[id] != 0) {
      // kStaysOnSlow (or kExcluded) unless touched, ahead or hot enough.
      return !promote_ || ((flags_any & (HeatState::kTouched | HeatState::kAhead)) == 0 &&
                           heat_bound < promote_heat_);
    }
    if (demote_to_[id] < 0) return true;  // kNowhereToDemote, or a rule before it
    if (take_warm) return false;
    if (!cold_on_) return true;  // kWarm, never exchangeable, or a rule before it
    // Idle for less than half the cold age: kWarm and not exchangeable, or a rule before it.
    const std::uint32_t idle = now_tick_ - std::min(now_tick_, earliest_access);
    return idle < (cold_ticks_ + 1) / 2;
  }
  // The unit's node counts as DRAM in the group's use (present and not a slow node).
  [[nodiscard]] bool in_dram(int node) const {
    const auto id = static_cast<std::size_t>(node);
    return id < slow_.size() && present_[id] != 0 && slow_[id] == 0;
  }

  // The idle time from which the cold-age pass demotes: the effective cold age,
  // and at least twice cold_age when the target's reads in DRAM go unseen.
  [[nodiscard]] std::uint32_t cold_after(bool unseen) const {
    return unseen ? unseen_ticks_ : effective_ticks_;
  }

  // The hold on units whose target's reads in DRAM go unseen (classify() calls
  // them cooling until idle for cold_after(true)), in one place: a held unit last
  // accessed at `last_access` goes all the same once idle for the effective cold
  // age if its node is under pressure (it has to make room in this plan): the
  // hold spends DRAM's slack, never its room.
  [[nodiscard]] bool hold_released(std::uint32_t last_access, bool unseen, bool pressed) const {
    return unseen && pressed && now_tick_ - std::min(now_tick_, last_access) >= effective_ticks_;
  }
  // The second step of the rules for a demotion candidate, once the plan knows
  // whether the unit's node is under pressure (`pressed`: short of its headroom
  // plus what waits for promotion, which the planner learns only after every
  // unit is classified): in which round of the cold-age pass it goes, or none.
  // The pass takes round 0, then round 1, each in rank order (coldest first):
  // cold units in round 0, cooling units the hold on unseen reads lets go
  // (hold_released) in round 1, after every cold one; the rest stay.
  static constexpr int kColdAgeRounds = 2;
  [[nodiscard]] std::optional<int> cold_age_round(Rule rule, std::uint32_t last_access, bool unseen,
                                                  bool pressed) const {
    if (rule == Rule::kCold) return 0;
    if (rule == Rule::kCooling && hold_released(last_access, unseen, pressed)) return 1;
    return std::nullopt;
  }
  // The idle time from which the cold-age pass demoted a unit idle for `idle`:
  // cold_after(true) for a target whose DRAM reads go unseen, unless the unit
  // went before that (hold_released).
  [[nodiscard]] std::uint32_t demoted_after(bool unseen, std::uint32_t idle) const {
    return cold_after(unseen && idle >= unseen_ticks_);
  }

  // For this group: a demotion target, or the group's own demotion_node.
  [[nodiscard]] bool slow(int node) const {
    return node >= 0 && static_cast<std::size_t>(node) < slow_.size() &&
           slow_[static_cast<std::size_t>(node)] != 0;
  }
  // Where a unit on `from` is demoted to: the group's demotion_node, else the
  // node's preferred demotion target; -1: nowhere.
  [[nodiscard]] int demotion_dest(int from) const {
    return from >= 0 && static_cast<std::size_t>(from) < demote_to_.size()
               ? demote_to_[static_cast<std::size_t>(from)]
               : -1;
  }
  // dram_limit or keep_free set: warm units may be demoted too.
  [[nodiscard]] bool watermark() const { return watermark_; }
  // Whether the group promotes at all (its policy's promote).
  [[nodiscard]] bool promotes() const { return promote_; }
  // A warm unit last accessed at `last_access` that is idle for half the cold
  // age or more: the room pass may demote it to make room for what waits on a
  // slow node (an exchange of a page idle for seconds for one just accessed),
  // never for the headroom alone.
  [[nodiscard]] bool exchangeable(std::uint32_t last_access) const {
    return cold_on_ && now_tick_ - std::min(now_tick_, last_access) >= (cold_ticks_ + 1) / 2;
  }
  // The tick until which a mis-demoted unit stays: cold_age << strikes after the
  // demotion that went wrong.
  [[nodiscard]] std::uint32_t protected_until(const HeatUnit& u) const {
    const std::uint64_t span = std::uint64_t{cold_ticks_ ? cold_ticks_ : residence_ticks_}
                               << std::min(u.strikes, 16U);
    return static_cast<std::uint32_t>(std::min<std::uint64_t>(u.last_moved + span, 0xffffffffU));
  }

  // The verdict in words (what explain shows for a unit no move covers).
  [[nodiscard]] std::string words(Rule rule, const HeatUnit& u, bool unseen = false) const;

 private:
  [[nodiscard]] bool excluded(AddrRange r) const;

  std::string name_;
  GroupPolicy policy_;
  TimeNs now_;
  std::uint32_t now_tick_;
  std::uint32_t cold_ticks_ = 0;
  std::uint32_t effective_ticks_ = 0;
  std::uint32_t unseen_ticks_ = 0;  // max(effective_ticks_, 2 x cold_ticks_)
  std::uint32_t residence_ticks_ = 0;
  float demote_heat_;
  float promote_heat_;
  bool cold_on_;
  bool promote_;
  bool watermark_;
  std::vector<AddrRange> exclude_;  // sorted by start
  std::vector<std::int8_t> present_;
  std::vector<std::int8_t> slow_;
  std::vector<int> demote_to_;
};

struct Verdict {
  Rule rule = Rule::kUnknownNode;
  const PlannedMove* move = nullptr;  // the planned move that covers the unit, if any
  std::string why;
};

// Why a unit of a target sits where it is: the planned move covering it
// (`moves`: the plan's moves of that target), else the rule's words.
Verdict explain_unit(const GroupRules& rules, const HeatUnit& u, std::span<const PlannedMove> moves,
                     bool unseen = false);

}  // namespace kvtier::policy
