#pragma once
// The planner: plan(Snapshot) -> Plan, a pure and deterministic function.
//
// Which units are candidates at all is policy/rules.hpp's classify() (the same
// verdict `kvtierctl explain` words). Per target group, three passes over the
// candidates, in this order, against one shared migration budget:
//   1. DRAM watermark: while the group's DRAM use is above dram_limit, or a DRAM
//      node has less than keep_free free, demote the group's coldest ranges
//      (lowest priority group first).
//   2. Hot promotion: ranges on a demotion node with heat >= promote_heat come
//      back to their home node, hottest first (highest priority group first),
//      as long as that keeps DRAM within dram_limit / keep_free / min_free.
//      When only room is missing, an exchange makes it: the group's warm units
//      idle for half the cold age or more go down, coldest first.
//   3. Cold-age demotion: ranges idle for cold_age or more go to the demotion
//      node, coldest first (lowest priority group first), in the rounds the
//      rules give (GroupRules::cold_age_round): the cold ones, then the cooling
//      ones a node under pressure takes from the hold on unseen reads.
// What passes 1 and 3 could have taken and left is the plan's spare: between
// steps, plan_promotions() exchanges it for what waits on a slow node.
// Nothing hotter than demote_heat is demoted and promote_heat > demote_heat
// (the config enforces it), so nothing ping-pongs; nothing moved less than
// min_residence ago moves; excluded ranges, a target's long-term pinned ranges
// (TargetView::pinned) and ranges on unknown nodes never move; a huge page the
// heat table knows (HeatTable::set_huge, fed by the daemon's residency reader)
// moves as one 2 MiB unit or not at all. Demotions
// stop at the demotion node's fill limit (limits.cxl_fill_max) and every
// destination keeps limits.min_free. When a unit does not fit in the remaining
// budget, planning stops there (coldest-/hottest-first order is never broken
// to fill the gap), except that a region larger than a huge page moves a
// piece of whole 2 MiB steps that fits, and planning stops after it.

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "policy/config.hpp"
#include "policy/heat.hpp"
#include "policy/topology.hpp"
#include "policy/types.hpp"

namespace kvtier::policy {

struct TargetView {
  Pid pid = 0;
  std::size_t group = 0;            // index into Snapshot::groups
  const HeatTable* heat = nullptr;  // its ranges: heat, last access/move, node
  // Where promotions go; default: the CPU node nearest to the range's node.
  std::optional<int> home_node;
  // No evidence sees this target's reads of its DRAM pages (a single-threaded
  // process under normal NUMA balancing: the kernel's scan leaves those pages
  // mapped). Idle since the last fault or write is then a lower bound: the
  // cold-age pass waits twice the cold age, unless the unit's DRAM node has to
  // make room in this plan (short of its headroom plus what waits); the room
  // pass takes such units from the cold age on (Rule::kCooling).
  bool dram_reads_unseen = false;
  // Long-term pinned ranges (PinnedMap::active(): sorted, merged): never
  // candidates, so no budget goes to what move_pages cannot migrate.
  std::span<const AddrRange> pinned;
};

struct Snapshot {
  // Nodes with current mem_total_bytes / mem_free_bytes (free memory per node).
  const Topology* topology = nullptr;
  std::span<const GroupConfig> groups;  // Config::groups
  LimitsConfig limits;                  // Config::limits
  std::vector<TargetView> targets;
  TimeNs now = 0;                  // CLOCK_MONOTONIC, the heat tables' clock
  std::uint64_t budget_bytes = 0;  // what may move now (TokenBucket::available())
  // Per group (index as in groups): its effective cold age now, never below the
  // configured cold_age (ColdAgeTuner). Shorter than groups: the configured one.
  std::vector<TimeNs> cold_age;
  // Whether the kernel promotes in hint faults' fault paths ([tiering]
  // promote_threshold): kvtier's own promotions then leave it half the DRAM
  // headroom; otherwise they may use all of it.
  bool fault_path_promotions = true;
};

// A demotion candidate a plan left in DRAM (cold or cooling), by pid and the
// unit's first address.
struct SpareUnit {
  Pid pid = 0;
  std::uint64_t addr = 0;
  int node = -1;  // where it was: a unit found elsewhere since has moved
};

// `spare`, when given, gets the units the plan could have demoted (idle for
// cold_age or more) and left in DRAM, coldest first, per group from the lowest
// priority: what plan_promotions() may exchange between steps.
Plan plan(const Snapshot& snap, std::vector<SpareUnit>* spare = nullptr);

// A unit of snap.targets[target] that page-level evidence says was accessed on a
// slow node: the loop's fast path asks for its promotion between steps.
struct PromotionCandidate {
  std::size_t target = 0;
  HeatUnit unit;
  // A page of a co-access group whose first page was touched on a slow node
  // (policy/coaccess.hpp): promoted by the same limits though not accessed itself.
  bool by_group = false;
};

// Promotions of these units, by the same rule (kAccessedOnSlow) and limits
// (budget, min_free, half the DRAM headroom) as plan(), without visiting every
// unit of every target. When DRAM is short of its headroom plus what waits, the
// `spare` units (a step's plan's spare, as they are now) that are still cold or
// cooling are demoted first, coldest first, as plan()'s room pass would: an
// exchange of colder pages for hotter ones between steps.
Plan plan_promotions(const Snapshot& snap, std::span<const PromotionCandidate> candidates,
                     std::span<const PromotionCandidate> spare = {});

}  // namespace kvtier::policy
