// DAMON over the tracked mappings: auto-sized region bounds and the initial
// regions (agent/sources/damon_source.hpp).

#include <gtest/gtest.h>

#include "agent/sources/damon_source.hpp"

namespace kvtier {
namespace {

using agent::damon_sizing;
using agent::DamonOptions;
using agent::split_evenly;

constexpr std::uint64_t kMiB = 1ULL << 20;

TEST(DamonSizing, RegionsFollowTheMemoryWithinTheCheckBudget) {
  DamonOptions o{.sample_us = 1'000'000, .aggr_us = 5'000'000};
  // 16 MiB: one region per 64 KiB.
  auto s = damon_sizing(o, 16 * kMiB);
  EXPECT_EQ(s.nr_regions.max, 256U);
  EXPECT_EQ(s.nr_regions.min, 64U);
  EXPECT_EQ(s.intervals.sample_us, 1'000'000U);
  EXPECT_EQ(s.intervals.aggr_us, 5'000'000U);
  EXPECT_EQ(s.intervals.update_us, 5'000'000U);
  // 256 MiB would be 4096 regions: kDamonChecksPerSec a second at one check a
  // second each caps it at 1000.
  s = damon_sizing(o, 256 * kMiB);
  EXPECT_EQ(s.nr_regions.max, agent::kDamonChecksPerSec);
  EXPECT_EQ(s.nr_regions.min, agent::kDamonChecksPerSec / 4);
  // Sampling twice as often halves the budget.
  o.sample_us = 500'000;
  EXPECT_EQ(damon_sizing(o, 256 * kMiB).nr_regions.max, agent::kDamonChecksPerSec / 2);
  // Tiny: never fewer than 16; explicit bounds win.
  EXPECT_EQ(damon_sizing(o, kMiB).nr_regions.max, 16U);
  o.min_regions = 20;
  o.max_regions = 30;
  s = damon_sizing(o, 256 * kMiB);
  EXPECT_EQ(s.nr_regions.min, 20U);
  EXPECT_EQ(s.nr_regions.max, 30U);
}

TEST(DamonSizing, InitialRegionsCutEveryRangeInWholePages) {
  const std::vector<AddrRange> ranges{{0x10000000, 0x10000000 + 4 * kMiB},
                                      {0x20000000, 0x20000000 + 2 * kMiB}};
  const auto r = split_evenly(ranges, 6);
  ASSERT_EQ(r.size(), 6U);
  for (const auto& x : r) {
    EXPECT_EQ(x.bytes(), kMiB);
    EXPECT_EQ(x.start % kPageSize, 0U);
  }
  EXPECT_EQ(r.front().start, 0x10000000U);
  EXPECT_EQ(r.back().end, 0x20000000U + 2 * kMiB);
  // Not a divisor: pieces of whole pages rounded up, the last one of a range shorter, and
  // never more than asked (DAMON's minimum may equal its maximum: 1 TiB in 250 was 251).
  const auto odd = split_evenly(std::vector<AddrRange>{{0, 10 * kPageSize}}, 3);
  ASSERT_EQ(odd.size(), 3U);
  EXPECT_EQ(odd[0].bytes(), 4 * kPageSize);
  EXPECT_EQ(odd[2].bytes(), 2 * kPageSize);
  const std::uint64_t tib = 1ULL << 40;
  const auto big = split_evenly(std::vector<AddrRange>{{tib, 2 * tib}}, 250);
  ASSERT_EQ(big.size(), 250U);
  EXPECT_EQ(big.front().start, tib);
  EXPECT_EQ(big.back().end, 2 * tib);
  for (std::size_t i = 1; i < big.size(); ++i) EXPECT_EQ(big[i].start, big[i - 1].end);
  EXPECT_TRUE(split_evenly({}, 5).empty());
}

}  // namespace
}  // namespace kvtier
