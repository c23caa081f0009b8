// Property tests: thousands of seeded random snapshots, each planned over a few
// rounds (moves applied, time advanced), checking the planner's promises.

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <random>

#include "policy/planner.hpp"
#include "policy/rules.hpp"

namespace kvtier::policy {
namespace {

constexpr TimeNs kSec = 1'000'000'000;
constexpr std::uint64_t kMiB = 1ULL << 20;

struct World {
  Topology topo;
  std::vector<GroupConfig> groups;
  std::vector<std::unique_ptr<HeatTable>> tables;
  std::vector<TargetView> targets;
  LimitsConfig limits;
};

World random_world(std::mt19937_64& rng) {
  auto pick = [&](std::uint64_t lo, std::uint64_t hi) {
    return std::uniform_int_distribution<std::uint64_t>(lo, hi)(rng);
  };
  auto coin = [&](double p) { return std::bernoulli_distribution(p)(rng); };
  World w;
  const int slow_nodes = static_cast<int>(pick(1, 2));
  w.topo.nodes.push_back(NumaNode{.id = 0,
                                  .cpus = {0},
                                  .mem_total_bytes = 64 * kMiB,
                                  .mem_free_bytes = pick(0, 64) * kMiB,
                                  .distance = {{0, 10}, {1, 20}, {2, 30}},
                                  .memory_tier = 4});
  for (int n = 1; n <= slow_nodes; ++n) {
    const std::uint64_t total = pick(4, 64) * kMiB;
    w.topo.nodes.push_back(NumaNode{.id = n,
                                    .mem_total_bytes = total,
                                    .mem_free_bytes = pick(0, total / kPageSize) * kPageSize,
                                    .distance = {{0, 10 + 10 * n}, {n, 10}},
                                    .memory_tier = 22});
  }
  w.limits.cxl_fill_max = static_cast<double>(pick(50, 100)) / 100.0;
  w.limits.min_free = pick(0, 4) * kMiB;
  w.limits.dram_headroom = coin(0.3) ? 0.0 : static_cast<double>(pick(1, 20)) / 100.0;
  const std::size_t ngroups = pick(1, 3);
  for (std::size_t g = 0; g < ngroups; ++g) {
    GroupConfig gc{.name = fmt::format("g{}", g),
                   .priority = static_cast<int>(pick(0, 3)),
                   .select = {.pid = {1}}};
    if (coin(0.2))
      gc.demotion_node = static_cast<int>(pick(1, static_cast<std::uint64_t>(slow_nodes)));
    auto& p = gc.policy;
    p.cold_age = coin(0.8) ? std::optional<TimeNs>(pick(1, 120) * kSec) : std::nullopt;
    p.half_life = pick(1, 60) * kSec;
    p.promote = coin(0.8);
    p.demote_heat = static_cast<double>(pick(0, 40)) / 10.0;
    p.promote_heat = p.demote_heat + static_cast<double>(pick(1, 40)) / 10.0;
    p.min_residence = pick(0, 120) * kSec;
    if (coin(0.3)) p.dram_limit = pick(0, 2 * 1024) * kPageSize;
    if (coin(0.3)) p.keep_free = pick(1, 64) * kMiB;
    if (coin(0.3)) {
      const std::uint64_t a = 0x10000000 + pick(0, 600) * kPageSize;
      p.exclude.push_back({a, a + pick(1, 64) * kPageSize});
    }
    w.groups.push_back(gc);
  }
  const std::size_t ntargets = pick(1, 4);
  for (std::size_t t = 0; t < ntargets; ++t) {
    const std::size_t g = pick(0, ngroups - 1);
    const auto gran = coin(0.25) ? Granularity::kRegion : Granularity::kPage;
    auto table = std::make_unique<HeatTable>(HeatParams{.half_life = w.groups[g].policy.half_life,
                                                        .granularity = gran,
                                                        .misdemotion_window = pick(1, 60) * kSec,
                                                        .frontier_bytes = pick(0, 32) * kPageSize});
    const std::uint64_t npages = pick(1, 1024);
    const std::uint64_t base = 0x10000000;
    for (std::uint64_t i = 0; i < npages;) {
      const std::uint64_t len = std::min(npages - i, pick(1, 64));
      const int node =
          coin(0.05) ? -1 : static_cast<int>(pick(0, static_cast<std::uint64_t>(slow_nodes)));
      table->track({base + i * kPageSize, base + (i + len) * kPageSize}, node, pick(0, 300) * kSec);
      i += len;
    }
    if (gran == Granularity::kPage && coin(0.3)) table->set_huge(base, true);
    for (int s = 0, n = static_cast<int>(pick(0, 3000)); s < n; ++s) {
      table->add(AccessSample{.addr = base + pick(0, npages - 1) * kPageSize,
                              .time = pick(200, 300) * kSec,
                              .weight = static_cast<std::uint32_t>(pick(1, 50))});
    }
    for (int m = 0, n = static_cast<int>(pick(0, 5)); m < n; ++m) {
      const std::uint64_t a = base + pick(0, npages - 1) * kPageSize;
      const int to = static_cast<int>(pick(0, static_cast<std::uint64_t>(slow_nodes)));
      table->mark_moved({a, a + pick(1, 32) * kPageSize}, to, pick(200, 300) * kSec, to != 0);
    }
    // Demotions then accesses: mis-demotions (strikes) and page-level evidence on slow nodes.
    for (int m = 0, n = static_cast<int>(pick(0, 4)); m < n; ++m) {
      const std::uint64_t a = base + pick(0, npages - 1) * kPageSize;
      const AddrRange r{a, a + pick(1, 16) * kPageSize};
      const TimeNs at = pick(200, 290) * kSec;
      table->mark_moved(r, 1, at, true);
      // Touched once (weak evidence) or twice (a mis-demotion, a strike: HeatState::kReturned).
      table->add(AccessSample{.addr = r.start,
                              .time = at + pick(1, 10) * kSec,
                              .weight = static_cast<std::uint32_t>(pick(1, 2))});
      if (coin(0.5)) table->set_node(r, 0);
    }
    if (gran == Granularity::kRegion) table->compact(300 * kSec);
    w.targets.push_back(
        TargetView{.pid = static_cast<Pid>(100 + t), .group = g, .heat = table.get()});
    w.tables.push_back(std::move(table));
  }
  return w;
}

struct UnitInfo {
  HeatUnit unit;
  std::size_t target = 0;
  const PlannedMove* move = nullptr;
};

bool excluded(const GroupPolicy& p, AddrRange r) {
  for (const auto& e : p.exclude) {
    if (e.start < r.end && r.start < e.end) return true;
  }
  return false;
}

void check(const World& w, const Snapshot& snap, const Plan& plan, std::uint64_t seed) {
  SCOPED_TRACE(fmt::format("seed {}", seed));
  const std::uint32_t now_tick = to_tick(snap.now);
  // Budget.
  std::uint64_t total = 0;
  for (const auto& m : plan.moves) total += m.range.bytes();
  EXPECT_LE(total, snap.budget_bytes);
  EXPECT_EQ(total, plan.demote_bytes + plan.promote_bytes);
  // Every unit, and the move (at most one) covering it.
  std::vector<UnitInfo> units;
  std::map<Pid, std::size_t> target_of;
  for (std::size_t t = 0; t < w.targets.size(); ++t) target_of[w.targets[t].pid] = t;
  for (std::size_t t = 0; t < w.targets.size(); ++t) {
    w.targets[t].heat->for_each_unit(
        snap.now, [&](const HeatUnit& u) { units.push_back(UnitInfo{.unit = u, .target = t}); });
  }
  for (const auto& m : plan.moves) {
    const std::size_t t = target_of.at(m.pid);
    std::uint64_t covered = 0;
    for (auto& u : units) {
      if (u.target != t || u.unit.range.end <= m.range.start || m.range.end <= u.unit.range.start) {
        continue;
      }
      // Moves cover whole units (huge pages whole) and no unit is in two moves:
      // nothing is both promoted and demoted.
      EXPECT_LE(m.range.start, u.unit.range.start);
      EXPECT_GE(m.range.end, u.unit.range.end);
      EXPECT_EQ(u.move, nullptr) << "unit in two moves";
      u.move = &m;
      covered += u.unit.range.bytes();
    }
    EXPECT_EQ(covered, m.range.bytes());
  }
  std::map<int, std::int64_t> delta;
  for (const auto& u : units) {
    if (u.move == nullptr) continue;
    const auto& m = *u.move;
    const std::size_t g = w.targets[u.target].group;
    const GroupPolicy& pol = w.groups[g].policy;
    EXPECT_EQ(m.from_node, u.unit.node);
    EXPECT_NE(m.from_node, m.to_node);
    EXPECT_FALSE(excluded(pol, u.unit.range));
    if (m.reason == MoveReason::kHotPromotion) {
      // Accessed on the slow node since it got there, whenever it got there.
      EXPECT_TRUE(u.unit.touched || u.unit.ahead ||
                  u.unit.heat >= static_cast<float>(pol.promote_heat));
      EXPECT_TRUE(pol.promote);
    } else {
      EXPECT_LE(u.unit.heat, static_cast<float>(pol.demote_heat));
      // Min residence and the protection of mis-demoted pages.
      if (u.unit.last_moved != 0) {
        EXPECT_GE(from_tick(now_tick - u.unit.last_moved), pol.min_residence);
      }
      if (u.unit.strikes > 0 && pol.cold_age) {
        EXPECT_GE(from_tick(now_tick - u.unit.last_moved), *pol.cold_age << u.unit.strikes);
      }
    }
    const TimeNs idle = from_tick(now_tick - std::min(now_tick, u.unit.last_access));
    if (m.reason == MoveReason::kColdAge) {
      ASSERT_TRUE(pol.cold_age);
      EXPECT_GE(idle, std::max(*pol.cold_age, g < snap.cold_age.size() ? snap.cold_age[g] : 0));
    }
    if (m.reason == MoveReason::kHeadroom) {
      // For the headroom: idle for cold_age; in exchange for a promotion: half of it.
      ASSERT_TRUE(pol.cold_age);
      EXPECT_GE(idle, plan.promote_bytes > 0 ? *pol.cold_age / 2 - kTickNs : *pol.cold_age);
    }
    delta[m.to_node] += static_cast<std::int64_t>(u.unit.range.bytes());
    delta[m.from_node] -= static_cast<std::int64_t>(u.unit.range.bytes());
  }
  // Fill limits and min_free on every node something moved to.
  for (const auto& [id, d] : delta) {
    if (d <= 0) continue;
    const NumaNode* n = snap.topology->find(id);
    const auto free_after = static_cast<std::int64_t>(n->mem_free_bytes) - d;
    EXPECT_GE(free_after, static_cast<std::int64_t>(snap.limits.min_free)) << "node " << id;
    if (!n->has_cpus()) {
      EXPECT_LE(static_cast<double>(static_cast<std::int64_t>(n->mem_total_bytes) - free_after),
                snap.limits.cxl_fill_max * static_cast<double>(n->mem_total_bytes) + 1)
          << "node " << id;
    }
  }
  // Coldest first: within a group and a source node, a range that stays and
  // was eligible under the same rule is never colder than one demoted.
  const NodeFacts facts(*snap.topology);
  for (const auto& r : units) {
    if (r.move == nullptr || r.move->reason == MoveReason::kHotPromotion) continue;
    const std::size_t g = w.targets[r.target].group;
    const GroupRules rules(
        w.groups[g], facts, snap.now,
        g < snap.cold_age.size() ? std::optional<TimeNs>(snap.cold_age[g]) : std::nullopt);
    for (const auto& s : units) {
      if (s.move != nullptr || w.targets[s.target].group != g || s.unit.node != r.unit.node)
        continue;
      const Rule rule = rules.classify(s.unit);
      const bool eligible =
          rule == Rule::kCold ||
          (r.move->reason != MoveReason::kColdAge && rule == Rule::kCooling) ||
          (r.move->reason == MoveReason::kWatermark && rule == Rule::kWarm && rules.watermark());
      if (!eligible) continue;
      EXPECT_FALSE(s.unit.heat < r.unit.heat)
          << "stays at heat " << s.unit.heat << " while " << r.move->why;
    }
  }
}

// Plans every seed's world over three rounds (each plan applied as a perfect
// mover would, time advanced between rounds) and hands each plan to `visit`.
template <class Visit>
void for_each_plan(Visit&& visit) {
  for (std::uint64_t seed = 1; seed <= 1500; ++seed) {
    std::mt19937_64 rng(seed);
    World w = random_world(rng);
    TimeNs now = 300 * kSec;
    for (int round = 0; round < 3; ++round) {
      Snapshot snap{
          .topology = &w.topo,
          .groups = w.groups,
          .limits = w.limits,
          .targets = w.targets,
          .now = now,
          .budget_bytes = std::uniform_int_distribution<std::uint64_t>(0, 2048)(rng) * kPageSize};
      for (const auto& gc : w.groups) {
        // The tuner's effective cold age: at or above the configured one.
        snap.cold_age.push_back(gc.policy.cold_age.value_or(0) *
                                std::uniform_int_distribution<TimeNs>(1, 3)(rng));
      }
      const Plan p = plan(snap);
      visit(w, snap, p, seed);
      if (::testing::Test::HasFailure()) return;
      for (const auto& m : p.moves) {
        for (std::size_t t = 0; t < w.targets.size(); ++t) {
          if (w.targets[t].pid == m.pid) {
            w.tables[t]->mark_moved(m.range, m.to_node, now, m.reason != MoveReason::kHotPromotion);
          }
        }
        for (auto& n : w.topo.nodes) {
          if (n.id == m.to_node) n.mem_free_bytes -= m.range.bytes();
          if (n.id == m.from_node) n.mem_free_bytes += m.range.bytes();
        }
      }
      now += std::uniform_int_distribution<TimeNs>(1, 60)(rng) * kSec;
    }
  }
}

TEST(PlannerProperty, RandomSnapshotsKeepEveryPromise) {
  std::size_t moves = 0;
  std::size_t promotions = 0;
  std::size_t watermark = 0;
  for_each_plan([&](const World& w, const Snapshot& snap, const Plan& p, std::uint64_t seed) {
    check(w, snap, p, seed);
    for (const auto& m : p.moves) {
      moves++;
      promotions += m.reason == MoveReason::kHotPromotion ? 1 : 0;
      watermark += m.reason == MoveReason::kWatermark ? 1 : 0;
    }
  });
  // The generator must exercise every rule, or the properties prove little.
  EXPECT_GT(moves, 1000U);
  EXPECT_GT(promotions, 50U);
  EXPECT_GT(watermark, 50U);
}

// What `kvtierctl explain` says for a unit (policy::explain_unit) agrees with
// the plan, unit by unit: a unit the plan moves is explained by that move and
// the rule behind it; a unit it leaves is explained by a rule that keeps it,
// or, for a candidate, by what held the plan back (a note says it).
void check_explain(const World& w, const Snapshot& snap, const Plan& plan, std::uint64_t seed,
                   std::map<Rule, std::size_t>& seen) {
  SCOPED_TRACE(fmt::format("seed {}", seed));
  const NodeFacts facts(*snap.topology);
  for (const auto& tv : w.targets) {
    const GroupRules rules(w.groups[tv.group], facts, snap.now,
                           tv.group < snap.cold_age.size()
                               ? std::optional<TimeNs>(snap.cold_age[tv.group])
                               : std::nullopt);
    std::vector<PlannedMove> mine;
    for (const auto& m : plan.moves) {
      if (m.pid == tv.pid) mine.push_back(m);
    }
    tv.heat->for_each_unit(snap.now, [&](const HeatUnit& u) {
      const Verdict v = explain_unit(rules, u, mine);
      ++seen[v.rule];
      if (v.move == nullptr) {
        EXPECT_FALSE(v.why.starts_with("moving")) << v.why;
        if (v.rule == Rule::kCold || v.rule == Rule::kAccessedOnSlow) {
          EXPECT_FALSE(plan.notes.empty()) << "a candidate stays and no note says why: " << v.why;
        }
        return;
      }
      EXPECT_TRUE(v.why.starts_with(fmt::format("moving to node {}: ", v.move->to_node))) << v.why;
      switch (v.move->reason) {
        case MoveReason::kColdAge:
          EXPECT_EQ(v.rule, Rule::kCold) << v.why;
          break;
        case MoveReason::kWatermark:
          EXPECT_TRUE(v.rule == Rule::kCold || v.rule == Rule::kCooling ||
                      (v.rule == Rule::kWarm && rules.watermark()))
              << static_cast<int>(v.rule) << " " << v.why;
          break;
        case MoveReason::kHeadroom:
          // Cold and cooling units for the headroom; warm ones idle for half the
          // cold age in exchange for what waits to be promoted.
          EXPECT_TRUE(v.rule == Rule::kCold || v.rule == Rule::kCooling ||
                      (v.rule == Rule::kWarm && rules.exchangeable(u.last_access) &&
                       plan.promote_bytes > 0))
              << static_cast<int>(v.rule) << " " << v.why;
          break;
        case MoveReason::kHotPromotion:
          EXPECT_EQ(v.rule, Rule::kAccessedOnSlow) << v.why;
          break;
        case MoveReason::kManual:
          ADD_FAILURE() << "the planner never plans manual moves";
          break;
      }
    });
  }
}

TEST(PlannerProperty, ExplainAgreesWithThePlanUnitByUnit) {
  std::map<Rule, std::size_t> seen;
  for_each_plan([&](const World& w, const Snapshot& snap, const Plan& p, std::uint64_t seed) {
    check_explain(w, snap, p, seed, seen);
  });
  // Every rule but kNowhereToDemote (each world has a demotion target; see
  // rules_test.cpp) decided some units.
  for (const Rule r : {Rule::kUnknownNode, Rule::kRecentlyMoved, Rule::kExcluded,
                       Rule::kAccessedOnSlow, Rule::kStaysOnSlow, Rule::kProtected, Rule::kHot,
                       Rule::kWarm, Rule::kCooling, Rule::kCold}) {
    EXPECT_GT(seen[r], 100U) << "rule " << static_cast<int>(r);
  }
}

}  // namespace
}  // namespace kvtier::policy
