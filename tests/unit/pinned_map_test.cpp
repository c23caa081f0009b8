// The loop's knowledge of long-term pinned ranges (policy/pinned.hpp): the
// backoff of refused ranges, registered buffers, a mapping change; and the
// planner leaving them out so the budget goes to the rest.
#include "policy/pinned.hpp"

#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "policy/heat.hpp"
#include "policy/planner.hpp"
#include "policy/topology.hpp"

namespace kvtier::policy {
namespace {

constexpr TimeNs kSec = 1'000'000'000;
constexpr std::uint64_t kBase = 0x7f0000000000;

AddrRange pages(std::uint64_t first, std::uint64_t count) {
  return {kBase + first * kPageSize, kBase + (first + count) * kPageSize};
}

TEST(OverlapsAny, SortedRanges) {
  const std::vector<AddrRange> rs{pages(0, 2), pages(10, 5)};
  EXPECT_TRUE(overlaps_any(rs, pages(1, 1)));
  EXPECT_TRUE(overlaps_any(rs, pages(8, 3)));
  EXPECT_TRUE(overlaps_any(rs, pages(14, 10)));
  EXPECT_FALSE(overlaps_any(rs, pages(2, 8)));
  EXPECT_FALSE(overlaps_any(rs, pages(15, 1)));
  EXPECT_FALSE(overlaps_any({}, pages(0, 1)));
}

TEST(PinnedMap, RefusedUnitsJoinAndBackOff) {
  PinnedMap m;
  const TimeNs t0 = 1000 * kSec;
  const std::vector<AddrRange> units{pages(0, 1), pages(1, 1), pages(2, 1)};
  m.refused(units, t0);
  ASSERT_EQ(m.active(), (std::vector<AddrRange>{pages(0, 3)}));
  ASSERT_EQ(m.ranges().size(), 1U);
  EXPECT_EQ(m.ranges()[0].refusals, 1U);
  EXPECT_EQ(m.bytes(), 3 * kPageSize);
  EXPECT_TRUE(m.covers(pages(2, 1)));
  EXPECT_FALSE(m.covers(pages(3, 1)));
  EXPECT_EQ(m.sources(), "move_pages refusals");
  EXPECT_EQ(m.how(pages(1, 1).start, t0),
            "move_pages refused every attempt, 1 time in a row; tried again in 1m");
  // Still covered just before the backoff ends, not at its end.
  m.expire(t0 + kPinnedBackoffMin - 1);
  EXPECT_TRUE(m.covers(pages(0, 1)));
  m.expire(t0 + kPinnedBackoffMin);
  EXPECT_TRUE(m.active().empty());
  EXPECT_EQ(m.how(pages(1, 1).start, t0 + kPinnedBackoffMin), "");
  // Refused again: twice as long.
  const TimeNs t1 = t0 + kPinnedBackoffMin;
  m.refused(units, t1);
  ASSERT_EQ(m.ranges().size(), 1U);
  EXPECT_EQ(m.ranges()[0].refusals, 2U);
  EXPECT_EQ(m.ranges()[0].retry_at, t1 + 2 * kPinnedBackoffMin);
  EXPECT_EQ(m.ranges()[0].since, t0);
}

TEST(PinnedMap, BackoffDoublesUpToItsMaximum) {
  PinnedMap m;
  const std::vector<AddrRange> r{pages(0, 1)};
  TimeNs now = kSec;
  std::vector<TimeNs> waits;
  for (int i = 0; i < 10; ++i) {
    m.refused(r, now);
    waits.push_back(m.ranges()[0].retry_at - now);
    now = m.ranges()[0].retry_at;
  }
  EXPECT_EQ(waits[0], kPinnedBackoffMin);
  EXPECT_EQ(waits[1], 2 * kPinnedBackoffMin);
  EXPECT_EQ(waits[5], 32 * kPinnedBackoffMin);
  EXPECT_EQ(waits[6], kPinnedBackoffMax);  // 64 min would pass the hour
  EXPECT_EQ(waits[9], kPinnedBackoffMax);
  EXPECT_EQ(m.ranges()[0].refusals, 10U);
}

TEST(PinnedMap, ARefusalInsideALongerOneSplitsIt) {
  PinnedMap m;
  const std::vector<AddrRange> all{pages(0, 10)};
  m.refused(all, kSec);
  const std::vector<AddrRange> mid{pages(4, 2)};
  m.refused(mid, kSec + kPinnedBackoffMin);  // the first expired at that moment
  ASSERT_EQ(m.ranges().size(), 3U);
  EXPECT_EQ(m.ranges()[1].range, pages(4, 2));
  EXPECT_EQ(m.ranges()[1].refusals, 2U);
  EXPECT_EQ(m.ranges()[0].refusals, 1U);
  EXPECT_EQ(m.active(), (std::vector<AddrRange>{pages(4, 2)}));
}

TEST(PinnedMap, RegisteredBuffersAreReplacedAtEachRead) {
  PinnedMap m;
  const std::vector<AddrRange> two{pages(10, 4), pages(0, 2)};
  m.set_registered(two, kSec);
  EXPECT_EQ(m.active(), (std::vector<AddrRange>{pages(0, 2), pages(10, 4)}));
  EXPECT_EQ(m.how(pages(11, 1).start, kSec), "io_uring registered buffer");
  EXPECT_EQ(m.sources(), "io_uring registered buffers");
  // Registered buffers never expire; the next read replaces them.
  m.expire(1'000'000 * kSec);
  EXPECT_EQ(m.bytes(), 6 * kPageSize);
  const std::vector<AddrRange> one{pages(10, 4)};
  m.set_registered(one, 2 * kSec);
  EXPECT_EQ(m.active(), (std::vector<AddrRange>{pages(10, 4)}));
  EXPECT_EQ(m.ranges()[0].since, kSec);  // the same buffer, seen since the first read
  m.set_registered({}, 3 * kSec);
  EXPECT_TRUE(m.active().empty());
}

TEST(PinnedMap, AMappingChangeForgetsRefusalsNotRegisteredBuffers) {
  PinnedMap m;
  const std::vector<AddrRange> refused{pages(0, 2)};
  const std::vector<AddrRange> registered{pages(8, 2)};
  m.refused(refused, kSec);
  m.set_registered(registered, kSec);
  EXPECT_EQ(m.sources(), "io_uring registered buffers, move_pages refusals");
  m.mapping_changed();
  EXPECT_EQ(m.active(), (std::vector<AddrRange>{pages(8, 2)}));
  // Refused again after the change: a first refusal, the shortest backoff.
  m.refused(refused, 2 * kSec);
  EXPECT_EQ(m.ranges()[0].refusals, 1U);
}

// The planner spends no budget on pinned ranges: with a budget for 8 pages and
// the 8 coldest pinned, the next 8 move.
TEST(PinnedMap, ThePlannerLeavesPinnedRangesOut) {
  Topology topo;
  topo.nodes.push_back(NumaNode{.id = 0,
                                .cpus = {0},
                                .mem_total_bytes = 1ULL << 34,
                                .mem_free_bytes = 1ULL << 33,
                                .distance = {{0, 10}, {1, 20}},
                                .memory_tier = 4});
  topo.nodes.push_back(NumaNode{.id = 1,
                                .mem_total_bytes = 1ULL << 34,
                                .mem_free_bytes = 1ULL << 34,
                                .distance = {{0, 20}, {1, 10}},
                                .memory_tier = 22});
  GroupConfig g{.name = "g", .select = {.pid = {1}}};
  g.policy.cold_age = 30 * kSec;
  g.policy.half_life = 10 * kSec;
  g.policy.min_residence = 60 * kSec;
  g.policy.promote_heat = 2.0;
  g.policy.demote_heat = 0.5;
  const std::vector<GroupConfig> groups{g};
  const TimeNs now = 1000 * kSec;
  HeatTable heat(HeatParams{.half_life = g.policy.half_life});
  heat.track(pages(0, 8), 0, now - 500 * kSec);   // coldest: pinned
  heat.track(pages(8, 8), 0, now - 400 * kSec);   // next
  heat.track(pages(16, 8), 0, now - 300 * kSec);  // beyond the budget
  PinnedMap pinned;
  const std::vector<AddrRange> refused{pages(0, 8)};
  pinned.refused(refused, now);
  Snapshot snap{.topology = &topo, .groups = groups, .now = now, .budget_bytes = 8 * kPageSize};
  snap.targets.push_back(TargetView{.pid = 100, .group = 0, .heat = &heat});
  const Plan without = plan(snap);
  ASSERT_EQ(without.moves.size(), 1U);
  EXPECT_EQ(without.moves[0].range, pages(0, 8));  // the budget goes to the pinned pages
  snap.targets[0].pinned = pinned.active();
  const Plan with = plan(snap);
  ASSERT_EQ(with.moves.size(), 1U);
  EXPECT_EQ(with.moves[0].range, pages(8, 8));
  EXPECT_EQ(with.demote_bytes, 8 * kPageSize);
}

}  // namespace
}  // namespace kvtier::policy
