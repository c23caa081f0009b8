// The keep/move rules (policy/rules.hpp): which rule applies to a unit, and
// the words explain shows for it. The agreement of these verdicts with the
// planner over random worlds is in planner_property_test.cpp.

#include "policy/rules.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <optional>
#include <random>
#include <vector>

#include "policy/heat_state.hpp"

namespace kvtier::policy {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

constexpr TimeNs kSec = 1'000'000'000;
constexpr TimeNs kNow = 1000 * kSec;
constexpr std::uint64_t kGiB = 1ULL << 30;
constexpr std::uint64_t kBase = 0x7f0000000000;

NumaNode cpu_node(int id) {
  return NumaNode{.id = id,
                  .cpus = {0},
                  .mem_total_bytes = 16 * kGiB,
                  .mem_free_bytes = 8 * kGiB,
                  .distance = {{0, 10}, {1, 20}, {2, 20}},
                  .memory_tier = 4};
}

// Node 0 DRAM with CPUs; node 1 CPU-less in a lower tier (a demotion target);
// node 2 CPU-less in node 0's tier (memory, but not a demotion target).
Topology three_nodes() {
  Topology t;
  t.nodes.push_back(cpu_node(0));
  t.nodes.push_back(NumaNode{.id = 1,
                             .mem_total_bytes = 16 * kGiB,
                             .mem_free_bytes = 16 * kGiB,
                             .distance = {{0, 20}, {1, 10}, {2, 20}},
                             .memory_tier = 22});
  t.nodes.push_back(NumaNode{.id = 2,
                             .mem_total_bytes = 16 * kGiB,
                             .mem_free_bytes = 16 * kGiB,
                             .distance = {{0, 20}, {1, 20}, {2, 10}},
                             .memory_tier = 4});
  return t;
}

GroupConfig group() {
  GroupConfig g{.name = "g", .select = {.pid = {1}}};
  g.policy.cold_age = 30 * kSec;
  g.policy.min_residence = 60 * kSec;
  g.policy.promote_heat = 2.0;
  g.policy.demote_heat = 0.5;
  return g;
}

HeatUnit unit(int node, float heat, TimeNs idle, TimeNs moved_ago = 0) {
  return HeatUnit{.range = {kBase, kBase + kPageSize},
                  .heat = heat,
                  .last_access = to_tick(kNow - idle),
                  .last_moved = moved_ago == 0 ? 0U : to_tick(kNow - moved_ago),
                  .node = node};
}

TEST(Rules, EachRuleInItsOrder) {
  const Topology topo = three_nodes();
  const NodeFacts facts(topo);
  GroupConfig g = group();
  g.policy.exclude = {{kBase + 4 * kPageSize, kBase + 8 * kPageSize}};
  const GroupRules rules(g, facts, kNow);
  EXPECT_EQ(rules.classify(unit(-1, 0, 100 * kSec)), Rule::kUnknownNode);
  EXPECT_EQ(rules.classify(unit(7, 0, 100 * kSec)), Rule::kUnknownNode);
  HeatUnit ex = unit(0, 0, 100 * kSec);
  ex.range = {kBase + 7 * kPageSize, kBase + 9 * kPageSize};
  EXPECT_EQ(rules.classify(ex), Rule::kExcluded);
  EXPECT_EQ(rules.classify(unit(1, 3.0F, 0)), Rule::kAccessedOnSlow);
  EXPECT_EQ(rules.classify(unit(1, 1.0F, 0)), Rule::kStaysOnSlow);
  // Page-level evidence since it got there promotes, however recently it came.
  HeatUnit touched = unit(1, 0.0F, 0, 5 * kSec);
  touched.touched = true;
  EXPECT_EQ(rules.classify(touched), Rule::kAccessedOnSlow);
  // Never used, just past a page accessed since: the next a growing buffer fills.
  HeatUnit ahead = unit(1, 0.0F, 100 * kSec);
  ahead.ahead = true;
  EXPECT_EQ(rules.classify(ahead), Rule::kAccessedOnSlow);
  EXPECT_THAT(rules.words(Rule::kAccessedOnSlow, ahead), HasSubstr("never used"));
  EXPECT_EQ(rules.classify(unit(0, 0, 100 * kSec, 10 * kSec)), Rule::kRecentlyMoved);
  EXPECT_EQ(rules.classify(unit(0, 0, 100 * kSec, 61 * kSec)), Rule::kCold);
  // Mis-demoted twice: cold_age << 2 = 120 s after that demotion.
  HeatUnit struck = unit(0, 0, 100 * kSec, 61 * kSec);
  struck.strikes = 2;
  EXPECT_EQ(rules.classify(struck), Rule::kProtected);
  EXPECT_THAT(rules.words(Rule::kProtected, struck), HasSubstr("2 time(s)"));
  struck.strikes = 1;
  EXPECT_EQ(rules.classify(struck), Rule::kCold);
  EXPECT_EQ(rules.classify(unit(0, 0.6F, 100 * kSec)), Rule::kHot);
  EXPECT_EQ(rules.classify(unit(0, 0.5F, 29 * kSec)), Rule::kWarm);
  EXPECT_EQ(rules.classify(unit(0, 0.5F, 30 * kSec)), Rule::kCold);
  EXPECT_EQ(rules.demotion_dest(0), 1);
  EXPECT_FALSE(rules.watermark());
}

// The planner's scan skips a chunk of pages whose bounds say no page in it can
// be a candidate (yields_none): over random pages it never says so of pages
// one of which classify() makes a candidate, and it does say so often.
TEST(Rules, AChunkSkippedByItsBoundsHoldsNoCandidate) {
  const Topology topo = three_nodes();
  const NodeFacts facts(topo);
  std::mt19937_64 rng(33);
  int skipped = 0;
  for (const bool watermark : {false, true}) {
    for (const bool promote : {true, false}) {
      GroupConfig g = group();
      if (watermark) g.policy.keep_free = kGiB;
      g.policy.promote = promote;
      const GroupRules rules(g, facts, kNow);
      for (int k = 0; k < 4000; ++k) {
        const int node = std::array{-1, 0, 1, 2, 7}[rng() % 5];
        std::uint32_t earliest = to_tick(kNow);
        float heat_bound = 0.0F;
        std::uint16_t flags = 0;
        bool candidate = false;
        const TimeNs young = static_cast<TimeNs>(rng() % 40) * kSec;
        for (int p = 0; p < 8; ++p) {
          HeatUnit u = unit(node, static_cast<float>(rng() % 30) / 10.0F,
                            young + static_cast<TimeNs>(rng() % 4) * kSec,
                            rng() % 3 == 0 ? static_cast<TimeNs>(rng() % 120) * kSec : 0);
          u.touched = rng() % 8 == 0;
          u.ahead = rng() % 8 == 0;
          u.strikes = static_cast<unsigned>(rng() % 3);
          earliest = std::min(earliest, u.last_access);
          heat_bound = std::max(heat_bound, u.heat);
          if (u.touched) flags = static_cast<std::uint16_t>(flags | HeatState::kTouched);
          if (u.ahead) flags = static_cast<std::uint16_t>(flags | HeatState::kAhead);
          const Rule r = rules.classify(u);
          candidate = candidate || r == Rule::kCold || r == Rule::kCooling ||
                      r == Rule::kAccessedOnSlow ||
                      (r == Rule::kWarm && (watermark || rules.exchangeable(u.last_access)));
        }
        if (!rules.yields_none(node, earliest, heat_bound, flags, rules.watermark())) continue;
        ++skipped;
        ASSERT_FALSE(candidate) << "node " << node << ", earliest " << earliest << ", heat "
                                << heat_bound << ", flags " << flags << ", watermark " << watermark;
      }
    }
  }
  EXPECT_GT(skipped, 4000);
}

TEST(Rules, AnEffectiveColdAgeAboveTheFloorMakesCooling) {
  const Topology topo = three_nodes();
  const NodeFacts facts(topo);
  const GroupRules rules(group(), facts, kNow, 60 * kSec);
  EXPECT_EQ(rules.classify(unit(0, 0.0F, 29 * kSec)), Rule::kWarm);
  EXPECT_EQ(rules.classify(unit(0, 0.0F, 30 * kSec)), Rule::kCooling);
  EXPECT_EQ(rules.classify(unit(0, 0.0F, 60 * kSec)), Rule::kCold);
  EXPECT_THAT(rules.words(Rule::kCooling, unit(0, 0.0F, 30 * kSec)),
              HasSubstr("effective cold age 1m"));
  // Below the floor it is the floor.
  const GroupRules low(group(), facts, kNow, 5 * kSec);
  EXPECT_EQ(low.classify(unit(0, 0.0F, 29 * kSec)), Rule::kWarm);
  EXPECT_EQ(low.classify(unit(0, 0.0F, 30 * kSec)), Rule::kCold);
}

TEST(Rules, UnseenReadsMakeCoolingUpToTwiceTheColdAge) {
  const Topology topo = three_nodes();
  const NodeFacts facts(topo);
  const GroupRules rules(group(), facts, kNow);
  EXPECT_EQ(rules.classify(unit(0, 0.0F, 30 * kSec), true), Rule::kCooling);
  EXPECT_EQ(rules.classify(unit(0, 0.0F, 59 * kSec), true), Rule::kCooling);
  EXPECT_EQ(rules.classify(unit(0, 0.0F, 60 * kSec), true), Rule::kCold);
  EXPECT_EQ(rules.classify(unit(0, 0.0F, 30 * kSec)), Rule::kCold);
  EXPECT_EQ(rules.classify(unit(0, 0.0F, 29 * kSec), true), Rule::kWarm);
  EXPECT_THAT(rules.words(Rule::kCooling, unit(0, 0.0F, 30 * kSec), true),
              HasSubstr("< 1m, twice cold_age: this process's reads in DRAM go unseen"));
  EXPECT_THAT(rules.words(Rule::kCold, unit(0, 0.0F, 60 * kSec), true), HasSubstr(">= 1m)"));
  // An effective cold age above twice the floor wins.
  const GroupRules raised(group(), facts, kNow, 90 * kSec);
  EXPECT_EQ(raised.classify(unit(0, 0.0F, 80 * kSec), true), Rule::kCooling);
  EXPECT_EQ(raised.classify(unit(0, 0.0F, 90 * kSec), true), Rule::kCold);
  EXPECT_THAT(raised.words(Rule::kCooling, unit(0, 0.0F, 80 * kSec), true),
              HasSubstr("effective cold age 1.5m"));
}

// The hold on unseen DRAM reads is the rules' alone: a held unit goes from a node
// under pressure once idle for the effective cold age, and not before it, nor from a
// node with room, nor for a target whose reads are seen.
TEST(Rules, TheHoldOnUnseenReadsIsReleasedOnlyUnderPressure) {
  const Topology topo = three_nodes();
  const NodeFacts facts(topo);
  const GroupRules rules(group(), facts, kNow);
  const auto last = [](TimeNs idle) { return to_tick(kNow - idle); };
  EXPECT_TRUE(rules.hold_released(last(30 * kSec), true, true));
  EXPECT_TRUE(rules.hold_released(last(59 * kSec), true, true));
  EXPECT_FALSE(rules.hold_released(last(29 * kSec), true, true));
  EXPECT_FALSE(rules.hold_released(last(45 * kSec), true, false));
  EXPECT_FALSE(rules.hold_released(last(45 * kSec), false, true));
  // Under an effective cold age of 45 s, 40 s idle is not enough even under pressure.
  const GroupRules raised(group(), facts, kNow, 45 * kSec);
  EXPECT_FALSE(raised.hold_released(last(40 * kSec), true, true));
  EXPECT_TRUE(raised.hold_released(last(45 * kSec), true, true));
  // What explain says a unit was demoted after: twice cold_age if it waited that long.
  EXPECT_EQ(rules.demoted_after(true, to_tick(60 * kSec)), rules.cold_after(true));
  EXPECT_EQ(rules.demoted_after(true, to_tick(40 * kSec)), rules.cold_after(false));
  EXPECT_EQ(rules.demoted_after(false, to_tick(90 * kSec)), rules.cold_after(false));
  // The cold-age pass's rounds (the rules' second step): cold units first, then the
  // held ones the pressure lets go; nothing else.
  EXPECT_EQ(rules.cold_age_round(Rule::kCold, last(90 * kSec), false, false), 0);
  EXPECT_EQ(rules.cold_age_round(Rule::kCold, last(90 * kSec), true, true), 0);
  EXPECT_EQ(rules.cold_age_round(Rule::kCooling, last(45 * kSec), true, true), 1);
  EXPECT_EQ(rules.cold_age_round(Rule::kCooling, last(45 * kSec), true, false), std::nullopt);
  EXPECT_EQ(raised.cold_age_round(Rule::kCooling, last(40 * kSec), false, true), std::nullopt)
      << "cooling under a raised cold age: not the hold's, never released";
  EXPECT_EQ(rules.cold_age_round(Rule::kWarm, last(20 * kSec), true, true), std::nullopt);
}

TEST(Rules, AGroupsDemotionNodeIsItsSlowNode) {
  // Node 2 is no demotion target for the host, but the group demotes to it:
  // what sits there is on the group's slow node (promoted when hot), and DRAM
  // demotes to it, not to node 1.
  const Topology topo = three_nodes();
  const NodeFacts facts(topo);
  EXPECT_FALSE(facts.slow(2));
  GroupConfig g = group();
  g.demotion_node = 2;
  const GroupRules rules(g, facts, kNow);
  EXPECT_TRUE(rules.slow(2));
  EXPECT_EQ(rules.demotion_dest(0), 2);
  EXPECT_EQ(rules.classify(unit(2, 0.0F, 100 * kSec)), Rule::kStaysOnSlow);
  EXPECT_EQ(rules.classify(unit(2, 5.0F, 0)), Rule::kAccessedOnSlow);
  EXPECT_EQ(rules.classify(unit(0, 0.0F, 100 * kSec)), Rule::kCold);
  EXPECT_THAT(rules.words(Rule::kCold, unit(0, 0.0F, 100 * kSec)), HasSubstr("demotion to node 2"));
}

TEST(Rules, NowhereToDemoteOnAHostWithoutADemotionTarget) {
  Topology topo;
  topo.nodes.push_back(cpu_node(0));
  const NodeFacts facts(topo);
  const GroupRules rules(group(), facts, kNow);
  const HeatUnit cold = unit(0, 0.0F, 100 * kSec);
  EXPECT_EQ(rules.classify(cold), Rule::kNowhereToDemote);
  EXPECT_EQ(rules.words(Rule::kNowhereToDemote, cold),
            "nowhere to demote: node 0 has no demotion target and group 'g' names no "
            "demotion_node");
  EXPECT_EQ(rules.classify(unit(0, 0.6F, 100 * kSec)), Rule::kHot) << "hot says hot first";
}

TEST(Rules, WarmUnitsAndTheWatermark) {
  const Topology topo = three_nodes();
  const NodeFacts facts(topo);
  GroupConfig g = group();
  const HeatUnit warm = unit(0, 0.1F, 5 * kSec);
  EXPECT_EQ(GroupRules(g, facts, kNow).words(Rule::kWarm, warm), "warm: idle 5s < cold_age 30s");
  g.policy.dram_limit = kGiB;
  EXPECT_TRUE(GroupRules(g, facts, kNow).watermark());
  EXPECT_EQ(GroupRules(g, facts, kNow).words(Rule::kWarm, warm),
            "warm: idle 5s < cold_age 30s; demoted only while above dram_limit or keep_free");
  g.policy.cold_age.reset();
  const GroupRules no_age(g, facts, kNow);
  EXPECT_EQ(no_age.classify(unit(0, 0.0F, 1000 * kSec)), Rule::kWarm) << "no cold-age rule";
  EXPECT_EQ(no_age.words(Rule::kWarm, warm),
            "cold_age is off: demoted only while above dram_limit or keep_free");
  g.policy.dram_limit.reset();
  EXPECT_EQ(GroupRules(g, facts, kNow).words(Rule::kWarm, warm),
            "cold_age is off and no dram_limit or keep_free: never demoted");
}

TEST(Rules, ExplainPrefersThePlannedMove) {
  const Topology topo = three_nodes();
  const NodeFacts facts(topo);
  const GroupRules rules(group(), facts, kNow);
  const HeatUnit cold = unit(0, 0.0F, 100 * kSec);
  const std::vector<PlannedMove> moves{
      {.range = {kBase - kPageSize, kBase + 2 * kPageSize}, .to_node = 1, .why = "idle"}};
  const Verdict v = explain_unit(rules, cold, moves);
  EXPECT_EQ(v.rule, Rule::kCold);
  ASSERT_EQ(v.move, moves.data());
  EXPECT_EQ(v.why, "moving to node 1: idle");
  const Verdict waiting = explain_unit(rules, cold, {});
  EXPECT_EQ(waiting.move, nullptr);
  EXPECT_THAT(waiting.why, StartsWith("cold (idle 1.67m >= 30s): eligible for demotion to node 1"));
}

}  // namespace
}  // namespace kvtier::policy
