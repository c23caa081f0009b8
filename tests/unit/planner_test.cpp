#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <memory>

#include "policy/budget.hpp"
#include "policy/heat_state.hpp"
#include "policy/planner.hpp"
#include "policy/rules.hpp"

namespace kvtier::policy {
namespace {

using ::testing::HasSubstr;

constexpr TimeNs kSec = 1'000'000'000;
constexpr std::uint64_t kBase = 0x7f0000000000;
constexpr std::uint64_t kGiB = 1ULL << 30;
constexpr TimeNs kNow = 1000 * kSec;

// Node 0: CPUs and DRAM. Node 1: CPU-less, a slower memory tier (the CXL node).
Topology dram_and_cxl(std::uint64_t dram_free = 8 * kGiB, std::uint64_t cxl_free = 16 * kGiB) {
  Topology t;
  t.nodes.push_back(NumaNode{.id = 0,
                             .cpus = {0, 1},
                             .mem_total_bytes = 16 * kGiB,
                             .mem_free_bytes = dram_free,
                             .distance = {{0, 10}, {1, 20}},
                             .memory_tier = 4});
  t.nodes.push_back(NumaNode{.id = 1,
                             .mem_total_bytes = 16 * kGiB,
                             .mem_free_bytes = cxl_free,
                             .distance = {{0, 20}, {1, 10}},
                             .memory_tier = 22});
  return t;
}

GroupConfig group(std::string name = "g") {
  GroupConfig g{.name = std::move(name), .select = {.pid = {1}}};
  g.policy.cold_age = 30 * kSec;
  g.policy.half_life = 10 * kSec;
  g.policy.min_residence = 60 * kSec;
  g.policy.promote_heat = 2.0;
  g.policy.demote_heat = 0.5;
  return g;
}

AddrRange pages(std::uint64_t first, std::uint64_t count) {
  return {kBase + first * kPageSize, kBase + (first + count) * kPageSize};
}

struct Fixture {
  Topology topo = dram_and_cxl();
  std::vector<GroupConfig> groups{group()};
  std::vector<std::unique_ptr<HeatTable>> tables;
  Snapshot snap;

  HeatTable& table(std::size_t group_index = 0, Pid pid = 100) {
    tables.push_back(
        std::make_unique<HeatTable>(HeatParams{.half_life = groups[group_index].policy.half_life}));
    snap.targets.push_back(
        TargetView{.pid = pid, .group = group_index, .heat = tables.back().get()});
    return *tables.back();
  }
  Plan run(std::uint64_t budget = 64 * kGiB) {
    snap.topology = &topo;
    snap.groups = groups;
    snap.now = kNow;
    snap.budget_bytes = budget;
    return plan(snap);
  }
};

// Makes pages [first, first+count) about `rate` accesses/s as of kNow.
void heat_up(HeatTable& t, AddrRange r, double rate) {
  for (std::uint64_t a = r.start; a < r.end; a += kPageSize) {
    for (TimeNs s = kNow - 100 * kSec; s <= kNow; s += kSec) {
      t.add(AccessSample{.addr = a, .time = s, .weight = static_cast<std::uint32_t>(rate)});
    }
  }
}

std::uint64_t bytes_with(const Plan& p, MoveReason r) {
  std::uint64_t b = 0;
  for (const auto& m : p.moves) b += m.reason == r ? m.range.bytes() : 0;
  return b;
}

TEST(Planner, ColdAgeDemotesIdleRangesAsOneMove) {
  Fixture f;
  auto& t = f.table();
  t.track(pages(0, 64), 0, kNow - 100 * kSec);  // idle 100 s
  t.track(pages(64, 64), 0, kNow - 10 * kSec);  // idle 10 s: not yet
  const Plan p = f.run();
  ASSERT_EQ(p.moves.size(), 1U);
  const auto& m = p.moves[0];
  EXPECT_EQ(m.pid, 100);
  EXPECT_EQ(m.range, pages(0, 64));
  EXPECT_EQ(m.from_node, 0);
  EXPECT_EQ(m.to_node, 1);
  EXPECT_EQ(m.reason, MoveReason::kColdAge);
  EXPECT_EQ(m.why, "idle 1.67m >= cold age 30s; heat 0.00/s <= demote_heat 0.50/s; 256KiB");
  EXPECT_EQ(p.demote_bytes, 64 * kPageSize);
  EXPECT_EQ(p.promote_bytes, 0U);
}

TEST(Planner, NothingHotterThanDemoteHeatIsDemoted) {
  Fixture f;
  f.groups[0].policy.half_life = 3600 * kSec;  // heat lingers long after the last access
  auto& t = f.table();
  t.track(pages(0, 4), 0, 0);
  t.add(AccessSample{.addr = pages(0, 1).start, .time = kNow - 60 * kSec, .weight = 20000});
  const Plan p = f.run();
  ASSERT_EQ(p.moves.size(), 1U);
  EXPECT_EQ(p.moves[0].range, pages(1, 3));
}

TEST(Planner, DramLimitDemotesColdestFirst) {
  Fixture f;
  f.groups[0].policy.cold_age.reset();
  f.groups[0].policy.dram_limit = 60 * kPageSize;
  f.groups[0].policy.demote_heat = 5;
  f.groups[0].policy.promote_heat = 100;
  auto& t = f.table();
  t.track(pages(0, 100), 0, kNow - kSec);
  // Pages 0..39 get warmer with their index but all stay below demote_heat;
  // 40..99 are hot.
  for (std::uint64_t i = 0; i < 40; ++i) {
    t.add(AccessSample{
        .addr = pages(i, 1).start, .time = kNow, .weight = static_cast<std::uint32_t>(i + 1)});
  }
  heat_up(t, pages(40, 60), 50);
  const Plan p = f.run();
  EXPECT_EQ(bytes_with(p, MoveReason::kWatermark), 40 * kPageSize);
  ASSERT_EQ(p.moves.size(), 1U);
  EXPECT_EQ(p.moves[0].range, pages(0, 40));
  EXPECT_THAT(p.moves[0].why, HasSubstr("DRAM use above dram_limit 240KiB"));
  // Only 40 of the 40 pages over the limit could go: the hot ones stay, and it says so.
  f.groups[0].policy.dram_limit = 50 * kPageSize;
  const Plan q = f.run();
  EXPECT_EQ(bytes_with(q, MoveReason::kWatermark), 40 * kPageSize);
  ASSERT_EQ(q.notes.size(), 1U);
  EXPECT_THAT(q.notes[0], HasSubstr("above dram_limit"));
}

TEST(Planner, DramLimitTakesOnlyWhatIsNeededColdestFirst) {
  Fixture f;
  f.groups[0].policy.cold_age.reset();
  f.groups[0].policy.dram_limit = 90 * kPageSize;
  auto& t = f.table();
  t.track(pages(0, 100), 0, kNow - kSec);
  for (std::uint64_t i = 0; i < 100; ++i) {
    // Coldest at the end of the range.
    t.add(AccessSample{
        .addr = pages(i, 1).start, .time = kNow, .weight = static_cast<std::uint32_t>(200 - i)});
  }
  f.groups[0].policy.demote_heat = 1000;
  f.groups[0].policy.promote_heat = 2000;
  const Plan p = f.run();
  ASSERT_EQ(p.moves.size(), 1U);
  EXPECT_EQ(p.moves[0].range, pages(90, 10));
}

TEST(Planner, KeepFreeDemotesUntilTheNodeHasRoom) {
  Fixture f;
  f.topo = dram_and_cxl(/*dram_free=*/kGiB - 16 * kPageSize);
  f.groups[0].policy.cold_age.reset();
  f.groups[0].policy.keep_free = kGiB;
  auto& t = f.table();
  t.track(pages(0, 100), 0, kNow - kSec);
  const Plan p = f.run();
  EXPECT_EQ(bytes_with(p, MoveReason::kWatermark), 16 * kPageSize);
  EXPECT_THAT(p.moves.at(0).why, HasSubstr("node 0 free below keep_free 1GiB"));
}

TEST(Planner, HotPromotionWithHysteresisAndResidence) {
  Fixture f;
  auto& t = f.table();
  t.track(pages(0, 30), 1, kNow - 500 * kSec);
  heat_up(t, pages(0, 10), 10);  // hot: above promote_heat 2/s
  // Lukewarm by region reports alone (no page-level evidence): between
  // demote_heat and promote_heat, it stays on the slow node.
  for (TimeNs s = kNow - 30 * kSec; s <= kNow; s += kSec) {
    t.add(RegionAccess{.range = pages(10, 10), .nr_accesses = 1, .time = s});
  }
  t.mark_moved(pages(20, 10), 1, kNow - 30 * kSec, true);                // demoted 30 s ago...
  t.add(AccessSample{.addr = pages(25, 1).start, .time = kNow - kSec});  // ...touched since
  const Plan p = f.run();
  ASSERT_EQ(p.moves.size(), 2U);
  EXPECT_EQ(p.moves[0].range, pages(0, 10));
  EXPECT_EQ(p.moves[0].reason, MoveReason::kHotPromotion);
  EXPECT_EQ(p.moves[0].from_node, 1);
  EXPECT_EQ(p.moves[0].to_node, 0);
  EXPECT_THAT(p.moves[0].why, HasSubstr("accessed on slow node 1 since it was moved there"));
  // A page touched since its demotion comes back at once: min_residence holds
  // pages in DRAM, never on the slow node.
  EXPECT_EQ(p.moves[1].range, pages(25, 1));
  EXPECT_EQ(p.moves[1].reason, MoveReason::kHotPromotion);
  EXPECT_EQ(p.promote_bytes, 11 * kPageSize);
  // Lukewarm pages on DRAM stay too: between the thresholds nothing moves.
  Fixture g;
  auto& u = g.table();
  u.track(pages(0, 10), 0, kNow - 500 * kSec);
  heat_up(u, pages(0, 10), 1);
  EXPECT_TRUE(g.run().moves.empty());
  // promote = false: hot pages stay where they are.
  f.groups[0].policy.promote = false;
  EXPECT_TRUE(f.run().moves.empty());
}

TEST(Planner, PromotionGoesToTheHomeNodeWhenGiven) {
  Fixture f;
  f.topo.nodes.push_back(NumaNode{.id = 2,
                                  .cpus = {2},
                                  .mem_total_bytes = 16 * kGiB,
                                  .mem_free_bytes = 8 * kGiB,
                                  .distance = {{0, 12}, {1, 25}, {2, 10}},
                                  .memory_tier = 4});
  f.topo.nodes[1].distance[2] = 25;
  auto& t = f.table();
  t.track(pages(0, 1), 1, 0);
  heat_up(t, pages(0, 1), 10);
  EXPECT_EQ(f.run().moves.at(0).to_node, 0);  // nearest CPU node
  f.snap.targets[0].home_node = 2;
  EXPECT_EQ(f.run().moves.at(0).to_node, 2);
}

TEST(Planner, BudgetIsNeverExceededAndColdestGoFirst) {
  Fixture f;
  f.groups[0].policy.cold_age = 30 * kSec;
  auto& t = f.table();
  for (std::uint64_t i = 0; i < 100; ++i) t.track(pages(i, 1), 0, kNow - (100 + i) * kSec);
  const Plan p = f.run(10 * kPageSize + 100);
  EXPECT_EQ(p.demote_bytes, 10 * kPageSize);
  ASSERT_EQ(p.moves.size(), 1U);
  EXPECT_EQ(p.moves[0].range, pages(90, 10));  // the longest idle
  ASSERT_FALSE(p.notes.empty());
  EXPECT_THAT(p.notes.back(), HasSubstr("budget exhausted"));
  EXPECT_TRUE(f.run(0).moves.empty());
}

// The step's plan leaves what it could have demoted in DRAM as its spare, coldest
// first: here the units between cold_age and the effective cold age (cooling),
// which only the room pass takes. Nothing it moved and nothing warm is in it.
TEST(Planner, TheSpareIsWhatThePlanLeftColdestFirst) {
  Fixture f;
  f.groups[0].policy.cold_age = 30 * kSec;
  auto& t = f.table();
  for (std::uint64_t i = 0; i < 5; ++i) t.track(pages(i, 1), 0, kNow - (100 + i) * kSec);
  for (std::uint64_t i = 10; i < 20; ++i) t.track(pages(i, 1), 0, kNow - (30 + i) * kSec);
  t.track(pages(20, 5), 0, kNow - 5 * kSec);  // warm: idle 5 s < cold_age
  std::vector<SpareUnit> spare{{.pid = 7}};   // replaced, not appended to
  f.snap.topology = &f.topo;
  f.snap.groups = f.groups;
  f.snap.now = kNow;
  f.snap.budget_bytes = 64 * kGiB;
  f.snap.cold_age = {60 * kSec};  // the effective cold age, raised by mis-demotions
  const Plan p = plan(f.snap, &spare);
  ASSERT_EQ(p.moves.size(), 1U);
  EXPECT_EQ(p.moves[0].range, pages(0, 5));  // idle 100 s and more: cold
  ASSERT_EQ(spare.size(), 10U);
  for (std::size_t i = 0; i < spare.size(); ++i) {
    EXPECT_EQ(spare[i].pid, 100);
    EXPECT_EQ(spare[i].node, 0);
    EXPECT_EQ(spare[i].addr, pages(19 - i, 1).start);  // coldest first
  }
}

// Between steps DRAM is full: a page accessed on the slow node comes back only
// in exchange for the spare's coldest, and a spare unit touched since the step
// (warm again) is not taken.
TEST(Planner, APromotionTickExchangesTheSpareForWhatWaits) {
  Fixture f;
  f.topo = dram_and_cxl(16ULL << 20);  // DRAM free = min_free: no room for a page
  f.groups[0].policy.cold_age = 30 * kSec;
  auto& t = f.table();
  for (std::uint64_t i = 0; i < 10; ++i) t.track(pages(i, 1), 0, kNow - (100 + i) * kSec);
  t.track(pages(100, 2), 1, kNow - 500 * kSec);
  t.mark_moved(pages(100, 2), 1, kNow - 60 * kSec, true);
  for (std::uint64_t i = 100; i < 102; ++i) {
    t.add(AccessSample{.addr = pages(i, 1).start, .time = kNow - kSec});
  }
  t.add(AccessSample{.addr = pages(9, 1).start, .time = kNow - kSec});  // the coldest, touched
  f.snap.topology = &f.topo;
  f.snap.groups = f.groups;
  f.snap.now = kNow;
  f.snap.budget_bytes = 64 * kGiB;
  f.snap.limits.dram_headroom = 0;
  std::vector<PromotionCandidate> hot;
  for (std::uint64_t i = 100; i < 102; ++i) hot.push_back({.unit = *t.at(pages(i, 1).start, kNow)});
  std::vector<PromotionCandidate> spare;
  for (std::uint64_t i = 10; i-- > 0;) spare.push_back({.unit = *t.at(pages(i, 1).start, kNow)});
  // Without a spare: nothing fits, nothing moves.
  EXPECT_EQ(plan_promotions(f.snap, hot).moves.size(), 0U);
  const Plan p = plan_promotions(f.snap, hot, spare);
  EXPECT_EQ(p.promote_bytes, 2 * kPageSize);
  EXPECT_EQ(p.demote_bytes, 2 * kPageSize);
  EXPECT_EQ(bytes_with(p, MoveReason::kHeadroom), 2 * kPageSize);
  ASSERT_EQ(p.moves.size(), 2U);
  EXPECT_EQ(p.moves[0].range, pages(7, 2));  // the coldest not touched since: 8, then 7
  EXPECT_EQ(p.moves[0].to_node, 1);
  EXPECT_EQ(p.moves[1].range, pages(100, 2));
  EXPECT_EQ(p.moves[1].to_node, 0);
}

// Free memory the kernel keeps (below its zones' watermarks, /proc/zoneinfo) is
// no room: the same DRAM that takes a waiting page takes none once its free
// memory is reserved, and the room pass demotes for the headroom instead.
TEST(Planner, FreeMemoryTheKernelKeepsIsNoRoom) {
  Fixture f;
  f.topo = dram_and_cxl((16ULL << 20) + 2 * kPageSize);  // min_free plus two pages
  f.snap.limits.dram_headroom = 0;
  auto& t = f.table();
  t.track(pages(0, 2), 0, kNow - 100 * kSec);  // idle for more than the cold age
  t.track(pages(100, 2), 1, kNow - 500 * kSec);
  t.mark_moved(pages(100, 2), 1, kNow - 60 * kSec, true);
  for (std::uint64_t i = 100; i < 102; ++i) {
    t.add(AccessSample{.addr = pages(i, 1).start, .time = kNow - kSec});
  }
  Plan p = f.run();
  EXPECT_EQ(p.promote_bytes, 2 * kPageSize);
  EXPECT_EQ(bytes_with(p, MoveReason::kHeadroom), 0U) << "the room is there";

  f.topo.nodes[0].mem_reserved_bytes = 2 * kPageSize;
  EXPECT_EQ(f.topo.nodes[0].usable_free_bytes(), 16ULL << 20);
  p = f.run();
  EXPECT_EQ(p.promote_bytes, 2 * kPageSize);
  EXPECT_EQ(bytes_with(p, MoveReason::kHeadroom), 2 * kPageSize)
      << "the idle pages make the room the kernel's reserve took";
  ASSERT_EQ(p.moves.size(), 2U);
  EXPECT_EQ(p.moves[0].range, pages(0, 2));
  EXPECT_EQ(p.moves[0].to_node, 1);

  f.topo.nodes[0].mem_reserved_bytes = 1ULL << 40;  // more than is free: none usable
  EXPECT_EQ(f.topo.nodes[0].usable_free_bytes(), 0U);
}

// A target whose reads in DRAM go unseen (TargetView::dram_reads_unseen: a
// single-threaded process under normal NUMA balancing): the cold-age pass waits
// twice the cold age for its pages, the room pass takes them from the cold age on.
TEST(Planner, UnseenReadsWaitTwiceTheColdAgeUnlessRoomIsNeeded) {
  Fixture f;
  f.snap.limits.dram_headroom = 0;
  auto& t = f.table();
  t.track(pages(0, 4), 0, kNow - 45 * kSec);   // idle 45 s: cold age 30 s < 45 s < 60 s
  t.track(pages(10, 4), 0, kNow - 61 * kSec);  // idle 61 s: twice the cold age too
  Plan p = f.run();
  EXPECT_EQ(p.demote_bytes, 8 * kPageSize) << "seen reads: both idle for the cold age";

  f.snap.targets[0].dram_reads_unseen = true;
  p = f.run();
  ASSERT_EQ(p.moves.size(), 1U);
  EXPECT_EQ(p.moves[0].range, pages(10, 4));
  EXPECT_EQ(p.moves[0].reason, MoveReason::kColdAge);
  EXPECT_EQ(p.moves[0].why, "idle 1.02m >= cold age 1m; heat 0.00/s <= demote_heat 0.50/s; 16KiB");

  // DRAM far short of room (half of it for headroom): the room pass takes every
  // page idle for the cold age, the coldest first.
  f.topo = dram_and_cxl((16ULL << 20) + 2 * kPageSize);
  f.snap.limits.min_free = 16ULL << 20;
  f.snap.limits.dram_headroom = 0.5;
  p = f.run();
  EXPECT_EQ(bytes_with(p, MoveReason::kHeadroom), 8 * kPageSize) << "cooling ones too";

  // A page short: the room pass takes the coldest page, and the node being under
  // pressure, the cold-age pass holds nothing back.
  f.topo = dram_and_cxl((16ULL << 20) - kPageSize);
  f.snap.limits.dram_headroom = 0;
  p = f.run();
  EXPECT_EQ(bytes_with(p, MoveReason::kHeadroom), kPageSize);
  EXPECT_EQ(bytes_with(p, MoveReason::kColdAge), 7 * kPageSize);
  bool held_went = false;
  for (const auto& m : p.moves) {
    if (m.range == pages(0, 4)) {
      held_went = true;
      EXPECT_EQ(m.why, "idle 45s >= cold age 30s; heat 0.00/s <= demote_heat 0.50/s; 16KiB");
    }
  }
  EXPECT_TRUE(held_went) << "the pages idle for 45 s went at the cold age";
}

// The hold's release comes in the cold-age pass's second round
// (GroupRules::cold_age_round): when the budget runs out, every cold unit went
// before any unit the hold let go, though these rank colder.
TEST(Planner, HeldUnitsGoAfterEveryColdOneWhenTheBudgetRunsOut) {
  Fixture f;
  f.topo = dram_and_cxl((16ULL << 20) - kPageSize);  // a page short of min_free: pressed
  f.snap.limits.min_free = 16ULL << 20;
  f.snap.limits.dram_headroom = 0;
  f.table(0, 100).track(pages(0, 4), 0, kNow - 45 * kSec);  // held: 30 s <= idle < 60 s
  f.snap.targets[0].dram_reads_unseen = true;
  f.table(0, 200).track(pages(100, 4), 0, kNow - 35 * kSec);  // seen reads: cold
  const Plan p = f.run(5 * kPageSize);
  ASSERT_EQ(p.moves.size(), 2U);
  EXPECT_EQ(p.moves[0].pid, 100);
  EXPECT_EQ(p.moves[0].range, pages(0, 1)) << "the room pass takes the coldest page";
  EXPECT_EQ(p.moves[0].reason, MoveReason::kHeadroom);
  EXPECT_EQ(p.moves[1].pid, 200);
  EXPECT_EQ(p.moves[1].range, pages(100, 4)) << "round 0: the cold units";
  EXPECT_EQ(p.moves[1].reason, MoveReason::kColdAge);
  // With the budget for them, the held pages go too, in round 1.
  EXPECT_EQ(bytes_with(f.run(8 * kPageSize), MoveReason::kColdAge), 7 * kPageSize);
}

// DRAM full, nothing idle for cold_age: pages idle for half the cold age or more
// make room for what waits on the slow node (an exchange), coldest first; pages
// idle for less stay, and without anything waiting no warm page moves.
TEST(Planner, WarmPagesIdleForHalfTheColdAgeMakeRoomForWhatWaits) {
  Fixture f;
  f.topo = dram_and_cxl(16ULL << 20);  // DRAM free = min_free
  f.groups[0].policy.cold_age = 30 * kSec;
  f.snap.limits.dram_headroom = 0;
  auto& t = f.table();
  for (std::uint64_t i = 0; i < 4; ++i) t.track(pages(i, 1), 0, kNow - (20 - i) * kSec);
  t.track(pages(4, 2), 0, kNow - 5 * kSec);  // idle 5 s < 15 s: not exchangeable
  EXPECT_TRUE(f.run().moves.empty()) << "nothing waits: warm pages stay";
  t.track(pages(100, 2), 1, kNow - 500 * kSec);
  t.mark_moved(pages(100, 2), 1, kNow - 60 * kSec, true);
  for (std::uint64_t i = 100; i < 102; ++i) {
    t.add(AccessSample{.addr = pages(i, 1).start, .time = kNow - kSec});
  }
  const Plan p = f.run();
  ASSERT_EQ(p.moves.size(), 2U);
  EXPECT_EQ(p.moves[0].range, pages(0, 2));  // idle 20 s and 19 s: the coldest two
  EXPECT_EQ(p.moves[0].reason, MoveReason::kHeadroom);
  EXPECT_THAT(p.moves[0].why, HasSubstr("waiting for promotion"));
  EXPECT_THAT(p.moves[0].why, HasSubstr("half the cold_age"));
  EXPECT_EQ(p.moves[1].range, pages(100, 2));
  EXPECT_EQ(p.moves[1].reason, MoveReason::kHotPromotion);
  // Four waiting pages: the other two exchangeable ones go too, the young two never.
  t.track(pages(102, 2), 1, kNow - 500 * kSec);
  t.mark_moved(pages(102, 2), 1, kNow - 60 * kSec, true);
  for (std::uint64_t i = 102; i < 104; ++i) {
    t.add(AccessSample{.addr = pages(i, 1).start, .time = kNow - kSec});
  }
  const Plan q = f.run();
  EXPECT_EQ(q.demote_bytes, 4 * kPageSize);
  EXPECT_EQ(q.moves.at(0).range, pages(0, 4));
  EXPECT_EQ(q.promote_bytes, 4 * kPageSize);
}

TEST(Planner, FillLimitAndMinFreeHold) {
  Fixture f;
  // CXL: 16 GiB, 1 GiB + 10 pages free; cxl_fill_max 100%, min_free 1 GiB: 10 pages fit.
  f.topo = dram_and_cxl(8 * kGiB, kGiB + 10 * kPageSize);
  f.snap.limits.cxl_fill_max = 1.0;
  f.snap.limits.min_free = kGiB;
  auto& t = f.table();
  t.track(pages(0, 100), 0, 0);
  Plan p = f.run();
  EXPECT_EQ(p.demote_bytes, 10 * kPageSize);
  EXPECT_THAT(p.notes.back(), HasSubstr("fill limit"));
  // The fill limit: at most 90% of 16 GiB used; 1 GiB + 10 pages free leaves no room at all.
  f.snap.limits.cxl_fill_max = 0.9;
  f.snap.limits.min_free = 0;
  EXPECT_TRUE(f.run().moves.empty());
  f.topo = dram_and_cxl(8 * kGiB, 16 * kGiB / 10 + 40 * kPageSize);
  p = f.run();
  EXPECT_LE(p.demote_bytes, 40 * kPageSize);
  EXPECT_GE(p.demote_bytes, 39 * kPageSize);
}

TEST(Planner, HugePagesMoveWhole) {
  Fixture f;
  auto& t = f.table();
  const AddrRange huge{kBase, kBase + kHugePageSize};
  t.track(huge, 0, 0);
  t.set_huge(kBase, true);
  Plan p = f.run();
  ASSERT_EQ(p.moves.size(), 1U);
  EXPECT_EQ(p.moves[0].range, huge);
  // Half a huge page of budget moves nothing rather than half of it.
  EXPECT_TRUE(f.run(kHugePageSize / 2).moves.empty());
  // One hot 4 KiB page keeps the whole huge page in DRAM.
  t.add(AccessSample{.addr = kBase + 5 * kPageSize, .time = kNow, .weight = 1000});
  EXPECT_TRUE(f.run().moves.empty());
}

TEST(Planner, ExcludedAndUnknownRangesNeverMove) {
  Fixture f;
  f.groups[0].policy.exclude = {pages(10, 5)};
  f.groups[0].policy.dram_limit = kPageSize;
  auto& t = f.table();
  t.track(pages(0, 30), 0, 0);
  t.set_node(pages(25, 5), -1);
  const Plan p = f.run();
  ASSERT_EQ(p.moves.size(), 2U);
  EXPECT_EQ(p.moves[0].range, pages(0, 10));
  EXPECT_EQ(p.moves[1].range, pages(15, 10));
}

// A chunk of alike pages is planned as one run (HeatTable::for_each_run), with
// the plan of the same pages one by one: an exclusion and a pinned range that
// cut runs, and a budget that ends inside one.
TEST(Planner, RunsOfAlikePagesPlanAsThePagesOneByOne) {
  auto plan_of = [](bool spread) {
    Fixture f;
    f.groups[0].policy.exclude = {pages(10, 5)};
    const std::vector<AddrRange> pinned{pages(kPagesPerChunk + 100, 50)};
    auto& t = f.table();
    t.track(pages(0, 4 * kPagesPerChunk), 0, 0);
    t.set_node(pages(3 * kPagesPerChunk, kPagesPerChunk), 1);
    // A read of one page's node (the same node) gives its chunk a state per page.
    for (std::uint64_t c = 0; spread && c < 4; ++c) {
      t.set_node(pages(c * kPagesPerChunk, 1), c == 3 ? 1 : 0);
    }
    EXPECT_EQ(t.memory_bytes() > 4 * sizeof(PagePack), spread);
    f.snap.targets[0].pinned = pinned;
    return f.run(700 * kPageSize);
  };
  const Plan runs = plan_of(false);
  const Plan pages_one_by_one = plan_of(true);
  ASSERT_EQ(runs.moves.size(), 3U);
  EXPECT_EQ(runs.moves[0].range, pages(0, 10));
  EXPECT_EQ(runs.moves[1].range, pages(15, kPagesPerChunk + 100 - 15));
  EXPECT_EQ(runs.moves[2].range, pages(kPagesPerChunk + 150, 93));
  ASSERT_EQ(pages_one_by_one.moves.size(), runs.moves.size());
  for (std::size_t i = 0; i < runs.moves.size(); ++i) {
    EXPECT_EQ(pages_one_by_one.moves[i].range, runs.moves[i].range);
    EXPECT_EQ(pages_one_by_one.moves[i].why, runs.moves[i].why);
  }
  EXPECT_EQ(pages_one_by_one.notes, runs.notes);
}

TEST(Planner, ExplicitDemotionNode) {
  Fixture f;
  f.topo.nodes.push_back(NumaNode{.id = 2,
                                  .mem_total_bytes = 16 * kGiB,
                                  .mem_free_bytes = 16 * kGiB,
                                  .distance = {{0, 30}, {1, 30}, {2, 10}},
                                  .memory_tier = 22});
  f.topo.nodes[0].distance[2] = 30;
  f.groups[0].demotion_node = 2;
  auto& t = f.table();
  t.track(pages(0, 4), 0, 0);
  EXPECT_EQ(f.run().moves.at(0).to_node, 2);
}

TEST(Planner, NoDemotionNodeNoDemotion) {
  Fixture f;
  f.topo.nodes.pop_back();  // this host: one node
  auto& t = f.table();
  t.track(pages(0, 4), 0, 0);
  EXPECT_TRUE(f.run().moves.empty());
}

TEST(Planner, PriorityOrdersPromotionAndDemotion) {
  Fixture f;
  f.groups = {group("low"), group("high")};
  f.groups[1].priority = 10;
  for (auto& g : f.groups) g.policy.cold_age.reset();
  for (auto& g : f.groups) g.policy.keep_free = kGiB;
  f.topo = dram_and_cxl(kGiB - 8 * kPageSize);
  auto& low = f.table(0, 1);
  auto& high = f.table(1, 2);
  low.track(pages(0, 8), 0, 0);
  high.track(pages(0, 8), 0, 0);
  // keep_free: the low-priority group gives up its pages first, and that is enough.
  Plan p = f.run();
  ASSERT_EQ(p.moves.size(), 1U);
  EXPECT_EQ(p.moves[0].pid, 1);
  // Promotion: budget for one range; the high-priority group's goes.
  Fixture g;
  g.groups = {group("low"), group("high")};
  g.groups[1].priority = 10;
  auto& l2 = g.table(0, 1);
  auto& h2 = g.table(1, 2);
  for (auto* t : {&l2, &h2}) {
    t->track(pages(0, 4), 1, 0);
    heat_up(*t, pages(0, 4), 10);
  }
  p = g.run(4 * kPageSize);
  ASSERT_EQ(p.moves.size(), 1U);
  EXPECT_EQ(p.moves[0].pid, 2);
}

TEST(Planner, DeterministicAndRegionsToo) {
  Fixture f;
  auto& t = f.table();
  t.track(pages(0, 64), 0, 0);
  HeatTable regions({.half_life = 10 * kSec, .granularity = Granularity::kRegion});
  regions.track(pages(0, 512), 0, 0);
  regions.add(RegionAccess{.range = pages(100, 100), .nr_accesses = 20, .time = kNow});
  f.snap.targets.push_back(TargetView{.pid = 7, .group = 0, .heat = &regions});
  const Plan a = f.run();
  const Plan b = f.run();
  ASSERT_EQ(a.moves.size(), 3U);
  for (std::size_t i = 0; i < a.moves.size(); ++i) {
    EXPECT_EQ(a.moves[i].range, b.moves[i].range);
    EXPECT_EQ(a.moves[i].why, b.moves[i].why);
  }
  EXPECT_EQ(a.moves[1].pid, 7);
  EXPECT_EQ(a.moves[1].range, pages(0, 100));
  EXPECT_EQ(a.moves[2].range, pages(200, 312));
}

TEST(Planner, RegionLargerThanTheBudgetMovesInBudgetSizedPieces) {
  Fixture f;
  f.tables.clear();
  HeatTable regions({.half_life = 10 * kSec, .granularity = Granularity::kRegion});
  regions.track(pages(0, 8192), 0, kNow - 100 * kSec);  // one idle 32 MiB region
  f.snap.targets.push_back(TargetView{.pid = 7, .group = 0, .heat = &regions});
  const Plan p = f.run(5ULL << 20);  // 5 MiB left: one whole-2-MiB piece of 4 MiB
  ASSERT_EQ(p.moves.size(), 1U);
  EXPECT_EQ(p.moves[0].range, pages(0, 1024));
  EXPECT_EQ(p.moves[0].to_node, 1);
  EXPECT_EQ(f.run(1ULL << 20).moves.size(), 0U);  // less than one huge page: nothing
}

TEST(TokenBucket, RefillsAtTheRateUpToTheBurst) {
  TokenBucket b(100 << 20, 200 << 20, 0);
  EXPECT_EQ(b.available(), 200U << 20);
  b.consume(150 << 20);
  EXPECT_EQ(b.available(), 50U << 20);
  b.refill(kSec / 2);
  EXPECT_EQ(b.available(), 100U << 20);
  b.refill(100 * kSec);
  EXPECT_EQ(b.available(), 200U << 20);
  b.consume(1ULL << 40);
  EXPECT_EQ(b.available(), 0U);
}

TEST(TokenBucket, ReconfigureKeepsTheLevelAndClampsIt) {
  TokenBucket b(100 << 20, 200 << 20, 0);
  b.consume(150 << 20);
  // Refilled at the old rate up to now, then kept: no new burst.
  b.reconfigure(10 << 20, 400 << 20, kSec / 2);
  EXPECT_EQ(b.available(), 100U << 20);
  b.refill(kSec);
  EXPECT_EQ(b.available(), 105U << 20);
  b.reconfigure(10 << 20, 64 << 20, kSec);
  EXPECT_EQ(b.available(), 64U << 20);
}

// A buffer that grows forward, cleared whole when allocated (llama.cpp's KV
// cache): the never-used rows right past the rows in use are what the next
// tokens write. While the frontier is active they stay in DRAM; the tail
// beyond frontier_bytes goes cold; when the frontier idles for the cold age,
// all of it goes. Such a page already on the slow node comes back with it.
TEST(Planner, TheNeverUsedTailJustPastAnActiveFrontierStays) {
  const auto table = [](Fixture& f) -> HeatTable& {
    f.tables.push_back(std::make_unique<HeatTable>(
        HeatParams{.half_life = 10 * kSec, .frontier_bytes = 16 * kPageSize}));
    f.snap.targets.push_back(TargetView{.pid = 100, .heat = f.tables.back().get()});
    return *f.tables.back();
  };
  const auto fill = [](HeatTable& t, std::uint64_t rows, TimeNs when) {
    for (std::uint64_t i = 0; i < rows; ++i) {
      t.add(AccessSample{.addr = pages(i, 1).start, .time = when});
    }
  };
  Fixture f;
  HeatTable& t = table(f);
  t.track(pages(0, 64), 0, kNow - 100 * kSec);  // cleared at start: present, never used since
  fill(t, 10, kNow - kSec);                     // pages 0 to 9 written a second ago
  const Plan p = f.run();
  ASSERT_EQ(p.moves.size(), 1U);
  EXPECT_EQ(p.moves[0].range, pages(26, 38)) << "pages 10 to 25: ahead of the frontier";
  EXPECT_EQ(p.moves[0].reason, MoveReason::kColdAge);
  const GroupRules rules(f.groups[0], NodeFacts(f.topo), kNow);
  EXPECT_THAT(explain_unit(rules, *t.at(pages(25, 1).start, kNow), p.moves).why,
              HasSubstr("never used, just past a page accessed then"));

  Fixture idle;
  HeatTable& u = table(idle);
  u.track(pages(0, 64), 0, kNow - 100 * kSec);
  fill(u, 10, kNow - 40 * kSec);  // the frontier idle for longer than the cold age
  const Plan q = idle.run();
  EXPECT_EQ(bytes_with(q, MoveReason::kColdAge), 64 * kPageSize);

  Fixture slow;
  HeatTable& v = table(slow);
  v.track(pages(0, 8), 0, kNow - 100 * kSec);
  v.track(pages(8, 8), 1, kNow - 100 * kSec);  // placed on the slow node when cleared
  fill(v, 8, kNow - kSec);
  const Plan r = slow.run();
  EXPECT_EQ(bytes_with(r, MoveReason::kHotPromotion), 8 * kPageSize);
  EXPECT_EQ(bytes_with(r, MoveReason::kColdAge), 0U);
}

}  // namespace
}  // namespace kvtier::policy

namespace kvtier::policy {
namespace {

// A page of a co-access group (PromotionCandidate::by_group) comes back though
// it was not accessed itself; without the flag the same page stays. Neither is
// promoted where the group does not promote, and by_group makes no exchange:
// a page DRAM has no room for stays.
TEST(Planner, GroupPagesArePromotedByTheirGroupWithinTheRoom) {
  Fixture f;
  auto& t = f.table();
  t.track(pages(0, 4), 1, kNow - 500 * kSec);
  t.mark_moved(pages(0, 4), 1, kNow - 60 * kSec, true);
  f.snap.topology = &f.topo;
  f.snap.groups = f.groups;
  f.snap.now = kNow;
  f.snap.budget_bytes = 64 * kGiB;
  std::vector<PromotionCandidate> cands;
  for (std::uint64_t i = 0; i < 4; ++i) cands.push_back({.unit = *t.at(pages(i, 1).start, kNow)});
  EXPECT_EQ(plan_promotions(f.snap, cands).moves.size(), 0U);  // not accessed: they stay
  for (auto& c : cands) c.by_group = true;
  Plan p = plan_promotions(f.snap, cands);
  EXPECT_EQ(p.promote_bytes, 4 * kPageSize);
  ASSERT_EQ(p.moves.size(), 1U);
  EXPECT_EQ(p.moves[0].range, pages(0, 4));
  EXPECT_EQ(p.moves[0].to_node, 0);
  f.groups[0].policy.promote = false;
  f.snap.groups = f.groups;
  EXPECT_EQ(plan_promotions(f.snap, cands).moves.size(), 0U);
  f.groups[0].policy.promote = true;
  f.snap.groups = f.groups;
  f.topo = dram_and_cxl(16ULL << 20);  // DRAM free = min_free: no room
  f.snap.limits.dram_headroom = 0;
  EXPECT_EQ(plan_promotions(f.snap, cands).moves.size(), 0U);
}

}  // namespace
}  // namespace kvtier::policy
