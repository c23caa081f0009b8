// Co-access groups (policy/coaccess.hpp): what becomes a group, what a touch
// triggers, how a trial is judged, decay and the memory bound, and the hit
// rate that switches promotion by group.
#include "policy/coaccess.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "policy/types.hpp"

namespace kvtier::policy {
namespace {

constexpr TimeNs kMs = 1'000'000;
constexpr TimeNs kSec = 1'000'000'000;
constexpr std::uint64_t kBase = 0x7f0000000000;
constexpr TimeNs kRearm = 10 * kSec;

std::uint64_t page(std::uint64_t i) {
  return kBase + i * kPageSize;
}

// Touches pages [from, to) 1 ms apart from `t`.
void touch_run(CoAccessGroups& g, std::uint64_t from, std::uint64_t to, TimeNs t) {
  for (std::uint64_t i = from; i < to; ++i) {
    g.touch(page(i), t + static_cast<TimeNs>(i - from) * kMs, kRearm);
  }
}

TEST(CoAccess, PagesTouchedInOneWindowBecomeOneGroupWithTheLastAsWitness) {
  CoAccessGroups g;
  touch_run(g, 0, 8, 0);
  EXPECT_EQ(g.size(), 0U);  // the episode is still open
  g.settle(kSec);
  ASSERT_EQ(g.size(), 1U);
  const auto id = g.group_of(page(3));
  ASSERT_TRUE(id);
  ASSERT_EQ(g.ranges(*id).size(), 1U);
  EXPECT_EQ(g.ranges(*id)[0].start, page(0));
  EXPECT_EQ(g.ranges(*id)[0].end, page(8));
  EXPECT_EQ(g.witness(*id), page(7));
  EXPECT_FALSE(g.group_of(page(8)));
}

TEST(CoAccess, ALonePageAndTouchesAWindowApartMakeNoGroupTogether) {
  CoAccessGroups g;
  g.touch(page(0), 0, kRearm);
  g.touch(page(1), kSec, kRearm);  // closes the first episode: one page, no group
  g.settle(2 * kSec);              // the second: one page too
  EXPECT_EQ(g.size(), 0U);
}

TEST(CoAccess, TheFirstTouchOfAKnownGroupTriggersItOncePerRearm) {
  CoAccessGroups g;
  touch_run(g, 0, 4, 0);
  g.settle(kSec);
  const auto id = g.group_of(page(0));
  ASSERT_TRUE(id);
  const TimeNs back = 20 * kSec;
  EXPECT_EQ(g.touch(page(2), back, kRearm), id);
  EXPECT_FALSE(g.touch(page(1), back + kMs, kRearm));
  EXPECT_FALSE(g.touch(page(3), back + 5 * kSec, kRearm));
  EXPECT_EQ(g.touch(page(0), back + kRearm, kRearm), id);
  EXPECT_FALSE(g.touch(page(9), back + kRearm, kRearm));  // in no group
}

TEST(CoAccess, NewPagesOfAnEpisodeJoinTheOneGroupItTriggered) {
  CoAccessGroups g;
  touch_run(g, 0, 4, 0);
  g.settle(kSec);
  const auto id = g.group_of(page(0));
  ASSERT_TRUE(id);
  // It comes back with two more pages, read last.
  const TimeNs back = 20 * kSec;
  touch_run(g, 0, 6, back);
  g.settle(back + kSec);
  EXPECT_EQ(g.size(), 1U);
  EXPECT_EQ(g.group_of(page(5)), id);
  EXPECT_EQ(g.witness(*id), page(5));
}

TEST(CoAccess, AWitnessTouchedBeforeTheDeadlineIsAHitAndTheGroupStays) {
  CoAccessGroups g;
  touch_run(g, 0, 4, 0);
  g.settle(kSec);
  const auto id = g.group_of(page(0));
  ASSERT_TRUE(id);
  ASSERT_EQ(g.touch(page(0), 20 * kSec, kRearm), id);
  g.start_trial(*id, 2 * kPageSize, 30 * kSec);
  EXPECT_EQ(g.trials(), 1U);
  g.touch(page(3), 21 * kSec, kRearm);  // the witness
  g.settle(40 * kSec);
  const GroupJudged j = g.take_judged();
  EXPECT_EQ(j.hits, 1U);
  EXPECT_EQ(j.hit_bytes, 2 * kPageSize);
  EXPECT_EQ(j.wastes, 0U);
  EXPECT_EQ(g.size(), 1U);
  EXPECT_EQ(g.trials(), 0U);
}

TEST(CoAccess, AWitnessNotTouchedByTheDeadlineIsAWasteAndTheGroupIsForgotten) {
  CoAccessGroups g;
  touch_run(g, 0, 4, 0);
  g.settle(kSec);
  const auto id = g.group_of(page(0));
  ASSERT_TRUE(id);
  g.touch(page(0), 20 * kSec, kRearm);
  g.start_trial(*id, 3 * kPageSize, 30 * kSec);
  g.settle(29 * kSec);
  EXPECT_EQ(g.take_judged().wastes, 0U);
  g.settle(30 * kSec);
  const GroupJudged j = g.take_judged();
  EXPECT_EQ(j.wastes, 1U);
  EXPECT_EQ(j.wasted_bytes, 3 * kPageSize);
  EXPECT_EQ(g.size(), 0U);
  EXPECT_FALSE(g.group_of(page(0)));
}

TEST(CoAccess, GroupsDecayAndStayWithinTheirByteBudget) {
  CoAccessGroups g(CoAccessParams{.idle_ttl = 100 * kSec});
  for (std::uint64_t k = 0; k < 10; ++k) {
    touch_run(g, k * 100, k * 100 + 4, static_cast<TimeNs>(k) * 2 * kSec);
  }
  g.settle(30 * kSec);
  ASSERT_EQ(g.size(), 10U);
  const std::uint64_t all = g.memory_bytes();
  g.trim(30 * kSec, all / 2);
  EXPECT_LE(g.memory_bytes(), all / 2);
  EXPECT_GT(g.size(), 0U);
  EXPECT_FALSE(g.group_of(page(0)));  // the least recently seen went first
  EXPECT_TRUE(g.group_of(page(900)));
  g.trim(200 * kSec, all);  // all idle past the ttl
  EXPECT_EQ(g.size(), 0U);
}

TEST(CoAccess, AGroupIsAtMostMaxGroupBytes) {
  CoAccessGroups g(CoAccessParams{.max_group_bytes = 4 * kPageSize});
  touch_run(g, 0, 10, 0);
  g.settle(kSec);
  ASSERT_EQ(g.size(), 1U);
  const auto id = g.group_of(page(0));
  ASSERT_TRUE(id);
  EXPECT_EQ(g.ranges(*id)[0].bytes(), 4 * kPageSize);
  EXPECT_EQ(g.witness(*id), page(3));
}

TEST(CoAccess, ForgettingARangeForgetsItsGroupsAndTheirTrials) {
  CoAccessGroups g;
  touch_run(g, 0, 4, 0);
  touch_run(g, 100, 104, 2 * kSec);
  g.settle(4 * kSec);
  ASSERT_EQ(g.size(), 2U);
  const auto id = g.group_of(page(0));
  g.touch(page(0), 20 * kSec, kRearm);
  g.start_trial(*id, kPageSize, 30 * kSec);
  g.forget_range({page(2), page(3)});
  EXPECT_EQ(g.size(), 1U);
  EXPECT_EQ(g.trials(), 0U);
  EXPECT_TRUE(g.group_of(page(101)));
}

TEST(GroupHitRate, OnUntilEnoughTrialsThenByTheRateOfBytes) {
  GroupHitRate r(0.9);
  EXPECT_TRUE(r.on());
  EXPECT_DOUBLE_EQ(r.rate(), 1.0);
  r.add({.wasted_bytes = 100, .wastes = GroupHitRate::kMinJudged - 1});
  EXPECT_TRUE(r.on());  // too few judged to say
  EXPECT_DOUBLE_EQ(r.rate(), 0.0);
  r.add({.hit_bytes = 100, .hits = 1});
  EXPECT_FALSE(r.on());
  EXPECT_NEAR(r.rate(), 0.5, 0.02);
  // Hits weigh the older judgments down until the rate is back above 90%.
  for (int i = 0; i < 200 && !r.on(); ++i) r.add({.hit_bytes = 100, .hits = 1});
  EXPECT_TRUE(r.on());
  EXPECT_GE(r.rate(), 0.9);
}

}  // namespace
}  // namespace kvtier::policy
