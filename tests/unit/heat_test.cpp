#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <map>
#include <random>
#include <utility>
#include <vector>

#include "policy/heat.hpp"
#include "policy/heat_state.hpp"
#include "policy/types.hpp"

namespace kvtier::policy {
namespace {

constexpr TimeNs kSec = 1'000'000'000;
constexpr std::uint64_t kBase = 0x7f0000000000;

TEST(Decay, HalvesEveryHalfLifeAndReachesZero) {
  const Decay d(10 * kSec);
  EXPECT_FLOAT_EQ(d.factor(0), 1.0F);
  EXPECT_NEAR(d.factor(100), 0.5F, 1e-6);  // 100 ticks = 10 s
  EXPECT_NEAR(d.factor(250), std::exp2(-2.5), 1e-6);
  EXPECT_NEAR(d.factor(3000), std::exp2(-30.0), 1e-15);  // across the two tables
  EXPECT_EQ(d.factor(4001), 0.0F);                       // past 40 half-lives
  EXPECT_NEAR(d.per_event(), std::log(2.0) / 10.0, 1e-7);
  const Decay long_hl(24 * 3600 * kSec);
  EXPECT_NEAR(long_hl.factor(864000), 0.5F, 1e-5);
  EXPECT_NEAR(long_hl.factor(864000 * 3 + 7), 0.125F, 1e-5);
}

TEST(Heat, SteadyPointSamplesConvergeToTheAccessRate) {
  HeatTable t({.half_life = 5 * kSec});
  // 100 accesses/s, sampled every 1000 events: a sample of weight 1000 every 10 s.
  for (TimeNs now = 0; now <= 200 * kSec; now += 10 * kSec) {
    t.add(AccessSample{.addr = kBase + 10, .time = now, .weight = 1000});
  }
  // Just after a sample the EWMA sits above the rate, just before the next below.
  const float just_after = t.at(kBase, 200 * kSec)->heat;
  const float just_before = t.at(kBase, 210 * kSec - 1)->heat;
  EXPECT_GT(just_after, 100.0F);
  EXPECT_LT(just_before, 100.0F);
  EXPECT_NEAR((just_after + just_before) / 2, 100.0, 25.0);
}

TEST(Heat, RegionReportsAndSamplesGiveTheSameFigure) {
  // 20 accesses per 100 ms interval on every page = 200/s.
  HeatTable regions({.half_life = 2 * kSec});
  HeatTable pages({.half_life = 2 * kSec});
  const AddrRange r{kBase, kBase + 16 * kPageSize};
  for (TimeNs now = 0; now <= 30 * kSec; now += kSec / 10) {
    regions.add(RegionAccess{.range = r, .nr_accesses = 20, .max_nr_accesses = 20, .time = now});
    for (std::uint64_t p = r.start; p < r.end; p += kPageSize) {
      pages.add(AccessSample{.addr = p, .time = now, .weight = 20});
    }
  }
  const float from_regions = regions.at(kBase + 5 * kPageSize, 30 * kSec)->heat;
  const float from_samples = pages.at(kBase + 5 * kPageSize, 30 * kSec)->heat;
  EXPECT_NEAR(from_regions, 200.0F, 10.0F);
  EXPECT_FLOAT_EQ(from_regions, from_samples);
}

TEST(Heat, DecayIsLazyAndLastAccessIsKept) {
  HeatTable t({.half_life = 10 * kSec});
  t.add(AccessSample{.addr = kBase, .time = 100 * kSec, .weight = 10});
  const float h0 = t.at(kBase, 100 * kSec)->heat;
  EXPECT_NEAR(h0, 10 * std::log(2.0) / 10, 1e-5);
  EXPECT_NEAR(t.at(kBase, 120 * kSec)->heat, h0 / 4, 1e-5);
  EXPECT_EQ(t.at(kBase, 120 * kSec)->last_access, to_tick(100 * kSec));
  // A late sample counts, decayed, and does not move last_access back.
  t.add(AccessSample{.addr = kBase, .time = 90 * kSec, .weight = 10});
  EXPECT_NEAR(t.at(kBase, 100 * kSec)->heat, h0 * 1.5, 1e-5);
  EXPECT_EQ(t.at(kBase, 100 * kSec)->last_access, to_tick(100 * kSec));
}

TEST(Heat, TrackMoveAndUntrack) {
  HeatTable t;
  t.track({kBase, kBase + 3 * kHugePageSize}, 0, 5 * kSec);
  EXPECT_EQ(t.tracked_bytes(), 3 * kHugePageSize);
  EXPECT_EQ(t.at(kBase + kHugePageSize, 9 * kSec)->node, 0);
  EXPECT_EQ(t.at(kBase, 9 * kSec)->last_access, to_tick(5 * kSec));  // idle since tracking
  EXPECT_EQ(t.at(kBase, 9 * kSec)->last_moved, 0U);
  t.mark_moved({kBase, kBase + kPageSize}, 1, 7 * kSec);
  EXPECT_EQ(t.at(kBase, 9 * kSec)->node, 1);
  EXPECT_EQ(t.at(kBase, 9 * kSec)->last_moved, to_tick(7 * kSec));
  EXPECT_EQ(t.at(kBase + kPageSize, 9 * kSec)->node, 0);
  t.set_node({kBase + kPageSize, kBase + 3 * kPageSize}, 1);
  EXPECT_EQ(t.at(kBase + 2 * kPageSize, 9 * kSec)->node, 1);
  EXPECT_EQ(t.at(kBase + 2 * kPageSize, 9 * kSec)->last_moved, 0U);
  t.untrack({kBase, kBase + kHugePageSize + kPageSize});
  EXPECT_FALSE(t.at(kBase, 9 * kSec));
  EXPECT_FALSE(t.at(kBase + kHugePageSize, 9 * kSec));
  EXPECT_TRUE(t.at(kBase + kHugePageSize + kPageSize, 9 * kSec));
  EXPECT_EQ(t.tracked_bytes(), 2 * kHugePageSize - kPageSize);
  // set_node never starts tracking.
  t.set_node({kBase, kBase + kPageSize}, 0);
  EXPECT_FALSE(t.at(kBase, 9 * kSec));
}

TEST(Heat, AtMostEightBytesPerPageWithEvidence) {
  HeatTable t;
  const std::uint64_t pages = 64 * kPagesPerChunk;
  t.track({kBase, kBase + pages * kPageSize}, 0, kSec);
  EXPECT_LT(t.memory_bytes(), 64 * 128U) << "nothing tells the pages apart: a state a chunk";
  // Every page sampled at its own time with its own weight: a state each.
  for (std::uint64_t p = 0; p < pages; ++p) {
    t.add(AccessSample{.addr = kBase + p * kPageSize,
                       .time = kSec + static_cast<TimeNs>(p % 600) * kSec / 10,
                       .weight = 1 + static_cast<std::uint32_t>(p % 7)});
  }
  EXPECT_LE(static_cast<double>(t.memory_bytes()) / static_cast<double>(pages), 7.5);
  HeatTable r({.granularity = Granularity::kRegion});
  r.track({kBase, kBase + pages * kPageSize}, 0, kSec);
  EXPECT_EQ(r.region_count(), 1U);
  EXPECT_LT(r.memory_bytes(), 1024U);
}

// A PagePack gives back what it was given, bit for bit, whatever the states: last
// accesses that span more than its 2-byte window, more than 256 distinct moves, nodes
// and flags, and back to alike.
TEST(PagePack, GivesBackEveryStateExactly) {
  std::mt19937_64 rng(7);
  const HeatState start{.heat = 1.5F, .last_access = 100000, .node = 0, .flags = 1};
  PagePack pack(start);
  std::vector<HeatState> want(PagePack::kPages, start);
  EXPECT_TRUE(pack.alike());
  const std::uint64_t narrow = pack.memory_bytes();
  EXPECT_LE(narrow, PagePack::kPages * 7 + 128);
  // The bounds kept as pages change (no walk): the earliest access exact, the latest
  // access and the heat never below any page's, the flags or'ed over every page.
  const auto check = [&](const char* when) {
    std::uint32_t earliest = want[0].last_access;
    std::uint16_t flags = 0;
    for (std::size_t i = 0; i < PagePack::kPages; ++i) {
      const HeatState got = pack.get(i);
      ASSERT_EQ(got, want[i]) << when << ", page " << i;
      ASSERT_EQ(std::bit_cast<std::uint32_t>(got.heat), std::bit_cast<std::uint32_t>(want[i].heat));
      earliest = std::min(earliest, got.last_access);
      flags = static_cast<std::uint16_t>(flags | got.flags);
      ASSERT_LE(got.last_access, pack.latest_bound()) << when << ", page " << i;
      ASSERT_LE(got.heat, pack.heat_bound()) << when << ", page " << i;
    }
    ASSERT_EQ(pack.earliest_access(), earliest) << when;
    ASSERT_EQ(pack.flags_any() & flags, flags) << when;
    // The parts: every page within the bounds of one with its node and flags (two parts
    // may share those, with different moves), and each part's earliest access a page's.
    std::vector<PagePack::Part> parts;
    pack.for_each_part([&](const PagePack::Part& part) { parts.push_back(part); });
    std::size_t pages = 0;
    for (const auto& part : parts) pages += part.pages;
    ASSERT_EQ(pages, PagePack::kPages) << when;
    std::vector<bool> at_earliest(parts.size(), false);
    for (std::size_t i = 0; i < PagePack::kPages; ++i) {
      const HeatState& w = want[i];
      bool found = false;
      for (std::size_t k = 0; k < parts.size(); ++k) {
        const PagePack::Part& part = parts[k];
        if (part.node != w.node || part.flags != w.flags) continue;
        at_earliest[k] = at_earliest[k] || w.last_access == part.earliest_access;
        found = found || (w.last_access >= part.earliest_access &&
                          w.last_access <= part.latest_bound && w.heat <= part.heat_bound);
      }
      ASSERT_TRUE(found) << when << ", page " << i;
    }
    for (std::size_t k = 0; k < parts.size(); ++k)
      ASSERT_TRUE(at_earliest[k]) << when << ", part " << k;
  };
  const auto set = [&](std::size_t i, const HeatState& s) {
    want[i] = s;
    pack.set(i, s);
  };
  // Narrow: accesses within the window (also before the first), a few distinct moves.
  for (int k = 0; k < 4000; ++k) {
    const std::size_t i = rng() % PagePack::kPages;
    set(i, HeatState{.heat = static_cast<float>(rng() % 1000) / 7.0F,
                     .last_access = 100000 - 30000 + static_cast<std::uint32_t>(rng() % 60000),
                     .last_moved = static_cast<std::uint32_t>(rng() % 5) * 1000,
                     .node = static_cast<std::int16_t>(static_cast<int>(rng() % 3) - 1),
                     .flags = static_cast<std::uint16_t>(1 | ((rng() % 4) << 1))});
  }
  check("narrow");
  // The page(s) at the earliest access move on one by one: the next earliest is found.
  for (int k = 0; k < 600; ++k) {
    const std::uint32_t e = pack.earliest_access();
    for (std::size_t i = 0; i < PagePack::kPages; ++i) {
      if (want[i].last_access != e) continue;
      HeatState s = want[i];
      s.last_access = e + 1 + static_cast<std::uint32_t>(rng() % 50);
      set(i, s);
      break;
    }
  }
  check("the earliest moved on");
  const std::uint64_t version = pack.version();
  set(0, want[0]);
  EXPECT_NE(pack.version(), version) << "every set() is a new version";
  EXPECT_FALSE(pack.alike());
  // The distinct moves, nodes and flags (8 bytes each) and their parts' bounds (20 each).
  EXPECT_LT(pack.memory_bytes(), sizeof(PagePack) + 2048) << "no wide column yet";
  // Wide: an access 2 hours after the others, and a distinct move on every page.
  set(3, HeatState{.heat = 2.0F, .last_access = 100000 + 72000, .flags = 1});
  for (std::size_t i = 0; i < PagePack::kPages; ++i) {
    HeatState s = want[i];
    s.last_moved = 5000 + static_cast<std::uint32_t>(i);
    set(i, s);
  }
  check("wide");
  EXPECT_GT(pack.memory_bytes(), narrow);
  // All alike again, and the untracked counted.
  const HeatState end{.heat = 0.25F, .last_access = 7, .last_moved = 3, .node = 1, .flags = 9};
  for (std::size_t i = 0; i < PagePack::kPages; ++i) set(i, i < 10 ? HeatState{} : end);
  check("untracked");
  EXPECT_EQ(pack.tracked_pages(), PagePack::kPages - 10);
  EXPECT_FALSE(pack.alike());
  for (std::size_t i = 0; i < 10; ++i) set(i, end);
  check("alike");
  EXPECT_TRUE(pack.alike());
}

// Bytes per node are counted as the states change (no walk): after any mix of tracking,
// samples, reports, reads and moves they are what a walk of every unit counts.
TEST(Heat, BytesPerNodeAreKeptAsAWalkCountsThem) {
  std::mt19937_64 rng(33);
  HeatTable t({.region_touch_share = 0.5});
  const std::uint64_t span = 16 * kHugePageSize;
  const auto range = [&] {
    const std::uint64_t a = kBase + (rng() % (span / kPageSize)) * kPageSize;
    const std::uint64_t n = 1 + rng() % (rng() % 2 == 0 ? 8 : 3 * kPagesPerChunk);
    return AddrRange{a, a + n * kPageSize};
  };
  for (int k = 0; k < 3000; ++k) {
    const TimeNs now = kSec + k * kSec / 10;
    const int node = static_cast<int>(rng() % 3) - 1;
    switch (rng() % 7) {
      case 0:
        t.track(range(), node, now);
        break;
      case 1:
        t.untrack(range());
        break;
      case 2:
        t.set_node(range(), node);
        break;
      case 3:
        t.mark_moved(range(), std::max(node, 0), now, rng() % 2 == 0);
        break;
      case 4:
        t.add(RegionAccess{.range = range(), .nr_accesses = 3, .max_nr_accesses = 4, .time = now});
        break;
      default:
        t.add(AccessSample{.addr = range().start, .time = now, .weight = 1});
    }
    std::map<int, std::uint64_t> walked;
    std::uint64_t walked_unknown = 0;
    t.for_each_run(now, [&](const HeatUnit& u, std::uint64_t n) {
      (u.node >= 0 ? walked[u.node] : walked_unknown) += n * u.range.bytes();
    });
    std::uint64_t unknown = 0;
    ASSERT_EQ(t.bytes_per_node(&unknown), walked) << "after operation " << k;
    ASSERT_EQ(unknown, walked_unknown) << "after operation " << k;
    ASSERT_EQ(
        t.tracked_bytes(), unknown + [&] {
          std::uint64_t b = 0;
          for (const auto& [n, bytes] : walked) b += bytes;
          return b;
        }());
  }
}

TEST(Heat, HugeChunkIsOneUnitWithItsHottestPage) {
  HeatTable t;
  t.track({kBase, kBase + 2 * kHugePageSize}, 0, kSec);
  t.set_huge(kBase, true);
  t.add(AccessSample{.addr = kBase + 100 * kPageSize, .time = 2 * kSec, .weight = 50});
  t.add(AccessSample{.addr = kBase + 7 * kPageSize, .time = 3 * kSec, .weight = 1});
  std::vector<HeatUnit> units;
  t.for_each_unit(4 * kSec, [&](const HeatUnit& u) { units.push_back(u); });
  ASSERT_EQ(units.size(), 1 + kPagesPerChunk);
  EXPECT_TRUE(units[0].huge);
  EXPECT_EQ(units[0].range, (AddrRange{kBase, kBase + kHugePageSize}));
  EXPECT_FLOAT_EQ(units[0].heat, t.at(kBase + 100 * kPageSize, 4 * kSec)->heat);
  EXPECT_EQ(units[0].last_access, to_tick(3 * kSec));
  EXPECT_EQ(units[0].node, 0);
  EXPECT_FALSE(units[1].huge);
  EXPECT_EQ(units[1].range.bytes(), kPageSize);
}

// A chunk whose pages nothing told apart is one state: 16 bytes for 512 pages, each
// still a unit of its own. A point sample gives it a state per page; a write over
// the whole chunk that leaves its pages alike folds it back. What a write over it
// counts is counted for every page.
TEST(Heat, ChunkOfAlikePagesIsOneStateUntilEvidenceTellsThemApart) {
  HeatTable t;
  const std::uint64_t chunks = 64;
  t.track({kBase, kBase + chunks * kHugePageSize}, 0, kSec);
  EXPECT_LT(t.memory_bytes(), chunks * 128);
  EXPECT_EQ(t.tracked_bytes(), chunks * kHugePageSize);
  std::uint64_t n = 0;
  AddrRange last;
  t.for_each_unit(kSec, [&](const HeatUnit& u) {
    ++n;
    last = u.range;
  });
  EXPECT_EQ(n, chunks * kPagesPerChunk);
  EXPECT_EQ(last, (AddrRange{kBase + chunks * kHugePageSize - kPageSize,
                             kBase + chunks * kHugePageSize}));
  // A sample: that chunk a state per page, the others one state each.
  const std::uint64_t hit = kBase + kHugePageSize + 5 * kPageSize;
  t.add(AccessSample{.addr = hit, .time = 2 * kSec, .weight = 3});
  EXPECT_GE(t.memory_bytes(), sizeof(PagePack));
  EXPECT_LT(t.memory_bytes(), sizeof(PagePack) + chunks * 128);
  EXPECT_GT(t.at(hit, 2 * kSec)->heat, 0.0F);
  EXPECT_EQ(t.at(hit + kPageSize, 2 * kSec)->heat, 0.0F);
  EXPECT_EQ(t.tracked_bytes(), chunks * kHugePageSize);
  // Moved whole: still a state per page (one page's heat differs).
  t.mark_moved({kBase + kHugePageSize, kBase + 2 * kHugePageSize}, 1, 3 * kSec, true);
  EXPECT_GE(t.memory_bytes(), sizeof(PagePack));
  EXPECT_EQ(t.at(hit + kPageSize, 3 * kSec)->node, 1);
  // Untracked whole: the chunk goes, and its pages' array with it.
  t.untrack({kBase + kHugePageSize, kBase + 2 * kHugePageSize});
  EXPECT_LT(t.memory_bytes(), chunks * 128);
  EXPECT_EQ(t.tracked_bytes(), (chunks - 1) * kHugePageSize);

  // Every page sampled alike, then moved whole: alike again, one state.
  HeatTable alike;
  alike.track({kBase, kBase + kHugePageSize}, 0, kSec);
  for (std::uint64_t p = 0; p < kPagesPerChunk; ++p) {
    alike.add(AccessSample{.addr = kBase + p * kPageSize, .time = 2 * kSec, .weight = 1});
  }
  EXPECT_GE(alike.memory_bytes(), sizeof(PagePack));
  alike.mark_moved({kBase, kBase + kHugePageSize}, 1, 3 * kSec, true);
  EXPECT_LT(alike.memory_bytes(), 1024U);
  EXPECT_GT(alike.at(kBase + 9 * kPageSize, 3 * kSec)->heat, 0.0F);
  EXPECT_EQ(alike.at(kBase + 9 * kPageSize, 3 * kSec)->node, 1);

  // A strong region report over a demoted chunk touches all 512 pages, and a
  // residency read that finds them elsewhere counts all of them.
  HeatTable touched({.misdemotion_window = 60 * kSec, .region_touch_share = 0.5});
  touched.track({kBase, kBase + kHugePageSize}, 0, kSec);
  touched.mark_moved({kBase, kBase + kHugePageSize}, 1, 2 * kSec, true);
  touched.add(RegionAccess{.range = {kBase, kBase + kHugePageSize},
                           .nr_accesses = 10,
                           .max_nr_accesses = 10,
                           .time = 3 * kSec});
  EXPECT_EQ(touched.take_events().touched_demoted_pages, kPagesPerChunk);
  touched.add(RegionAccess{.range = {kBase, kBase + kHugePageSize},
                           .nr_accesses = 10,
                           .max_nr_accesses = 10,
                           .time = 4 * kSec});
  EXPECT_EQ(touched.take_events().misdemoted_bytes, kHugePageSize) << "touched twice";
  touched.set_node({kBase, kBase + kHugePageSize}, 0);
  EXPECT_EQ(touched.take_events().moved_by_kernel_bytes, kHugePageSize);
  EXPECT_LT(touched.memory_bytes(), 1024U);
}

TEST(Heat, RunsAreAChunkOfAlikePagesAtOnceAndEveryOtherUnitAlone) {
  HeatTable t;
  t.track({kBase, kBase + 3 * kHugePageSize}, 0, kSec);
  t.add(AccessSample{.addr = kBase + kHugePageSize + 7 * kPageSize, .time = 2 * kSec, .weight = 5});
  t.set_huge(kBase + 2 * kHugePageSize, true);
  std::vector<std::pair<HeatUnit, std::uint64_t>> runs;
  t.for_each_run(3 * kSec, [&](const HeatUnit& u, std::uint64_t n) { runs.emplace_back(u, n); });
  // The alike chunk one run of 512 pages, the sampled one 512 runs of 1, the huge one 1 of 2 MiB.
  ASSERT_EQ(runs.size(), 1 + kPagesPerChunk + 1);
  EXPECT_EQ(runs.front().second, kPagesPerChunk);
  EXPECT_EQ(runs.front().first.range, (AddrRange{kBase, kBase + kPageSize}));
  EXPECT_EQ(runs.back().second, 1U);
  EXPECT_EQ(runs.back().first.range.bytes(), kHugePageSize);
  EXPECT_TRUE(runs.back().first.huge);
  // Each run stands for units alike but for their address: at() agrees page by page.
  std::vector<HeatUnit> units;
  t.for_each_unit(3 * kSec, [&](const HeatUnit& u) { units.push_back(u); });
  ASSERT_EQ(units.size(), 2 * kPagesPerChunk + 1);
  for (const HeatUnit& u : units) {
    const auto at = t.at(u.range.start, 3 * kSec);
    ASSERT_TRUE(at.has_value());
    EXPECT_EQ(at->heat, u.heat);
    EXPECT_EQ(at->last_access, u.last_access);
    EXPECT_EQ(at->node, u.node);
    if (!u.huge) {
      EXPECT_EQ(at->range, u.range);
    }
  }
  EXPECT_GT(units[kPagesPerChunk + 7].heat, 0.0F);
  EXPECT_EQ(units[kPagesPerChunk - 1].range,
            (AddrRange{kBase + kHugePageSize - kPageSize, kBase + kHugePageSize}));
}

// Memory with no page-level evidence costs a walk one call per stretch of chunks in one
// state, not one per chunk: a cold pool located and left alone is one run.
TEST(Heat, ConsecutiveChunksInTheSameStateAreOneRun) {
  HeatTable t;
  t.track({kBase, kBase + 8 * kHugePageSize}, 1, kSec);
  t.set_node({kBase + 3 * kHugePageSize, kBase + 5 * kHugePageSize}, 0);
  const auto runs = [&] {
    std::vector<std::pair<AddrRange, std::uint64_t>> out;
    t.for_each_run(2 * kSec,
                   [&](const HeatUnit& u, std::uint64_t n) { out.emplace_back(u.range, n); });
    return out;
  };
  const auto at = [](std::uint64_t chunk) { return kBase + chunk * kHugePageSize; };
  using Runs = std::vector<std::pair<AddrRange, std::uint64_t>>;
  EXPECT_EQ(runs(), (Runs{{{at(0), at(0) + kPageSize}, 3 * kPagesPerChunk},
                          {{at(3), at(3) + kPageSize}, 2 * kPagesPerChunk},
                          {{at(5), at(5) + kPageSize}, 3 * kPagesPerChunk}}));
  // A huge chunk, and a chunk moved at another time, end a run.
  t.set_huge(at(6), true);
  t.mark_moved({at(1), at(2)}, 1, 2 * kSec);
  EXPECT_EQ(runs(), (Runs{{{at(0), at(0) + kPageSize}, kPagesPerChunk},
                          {{at(1), at(1) + kPageSize}, kPagesPerChunk},
                          {{at(2), at(2) + kPageSize}, kPagesPerChunk},
                          {{at(3), at(3) + kPageSize}, 2 * kPagesPerChunk},
                          {{at(5), at(5) + kPageSize}, kPagesPerChunk},
                          {{at(6), at(7)}, 1},
                          {{at(7), at(7) + kPageSize}, kPagesPerChunk}}));
  std::uint64_t units = 0;
  t.for_each_unit(2 * kSec, [&](const HeatUnit&) { ++units; });
  EXPECT_EQ(units, 7 * kPagesPerChunk + 1);
}

TEST(Heat, HugeBlocksFromTheResidencyReaderReplaceTheFlags) {
  HeatTable t;
  t.track({kBase, kBase + 3 * kHugePageSize}, 0, kSec);
  const std::uint64_t first_two[] = {kBase, kBase + kHugePageSize};
  t.set_huge_blocks(first_two);
  auto huge_units = [&t] {
    std::size_t n = 0;
    t.for_each_unit(kSec, [&](const HeatUnit& u) { n += u.huge ? 1 : 0; });
    return n;
  };
  EXPECT_EQ(huge_units(), 2U);
  const std::uint64_t last[] = {kBase + 2 * kHugePageSize};
  t.set_huge_blocks(last);
  EXPECT_EQ(huge_units(), 1U) << "the first two were split since";
  EXPECT_TRUE(t.at(kBase + 2 * kHugePageSize, kSec)->huge);
  EXPECT_FALSE(t.at(kBase, kSec)->huge);
}

TEST(Heat, RegionsSplitOnReportsAndMergeWhenAlike) {
  HeatTable t({.half_life = 10 * kSec, .granularity = Granularity::kRegion});
  t.track({kBase, kBase + 100 * kPageSize}, 0, 0);
  t.add(RegionAccess{.range = {kBase + 10 * kPageSize, kBase + 20 * kPageSize},
                     .nr_accesses = 5,
                     .max_nr_accesses = 20,
                     .time = kSec});
  EXPECT_EQ(t.region_count(), 3U);
  EXPECT_EQ(t.at(kBase + 15 * kPageSize, kSec)->range,
            (AddrRange{kBase + 10 * kPageSize, kBase + 20 * kPageSize}));
  EXPECT_EQ(t.at(kBase, kSec)->heat, 0.0F);
  EXPECT_GT(t.at(kBase + 10 * kPageSize, kSec)->heat, 0.0F);
  // A report over untracked memory tracks it; an idle one dates it by its age.
  t.add(RegionAccess{.range = {kBase + 200 * kPageSize, kBase + 300 * kPageSize},
                     .nr_accesses = 0,
                     .age = 50,
                     .time = 10 * kSec});
  EXPECT_EQ(t.at(kBase + 250 * kPageSize, 10 * kSec)->last_access, to_tick(5 * kSec));
  // A point sample lands in its region, spread over the region's pages.
  t.add(AccessSample{.addr = kBase + 50 * kPageSize, .time = kSec, .weight = 80});
  EXPECT_NEAR(t.at(kBase + 50 * kPageSize, kSec)->heat, 80.0 / 80 * std::log(2.0) / 10, 1e-6);
  EXPECT_EQ(t.region_count(), 4U);  // [0,10) [10,20) [20,100) [200,300)
}

TEST(Heat, CompactMergesAlikeNeighboursOnly) {
  HeatTable t({.half_life = 10 * kSec, .granularity = Granularity::kRegion});
  t.track({kBase, kBase + 100 * kPageSize}, 0, 0);
  for (std::uint64_t i = 10; i < 30; i += 5) {
    t.add(RegionAccess{.range = {kBase + i * kPageSize, kBase + (i + 5) * kPageSize},
                       .nr_accesses = 10,
                       .time = kSec});
  }
  t.set_node({kBase + 90 * kPageSize, kBase + 100 * kPageSize}, 1);
  EXPECT_EQ(t.region_count(), 7U);
  t.compact(kSec);
  EXPECT_EQ(t.region_count(), 4U);  // idle [0,10), hot [10,30), idle [30,90), node 1 [90,100)
  EXPECT_EQ(t.at(kBase + 12 * kPageSize, kSec)->range,
            (AddrRange{kBase + 10 * kPageSize, kBase + 30 * kPageSize}));
  EXPECT_NEAR(t.at(kBase + 12 * kPageSize, kSec)->heat, 10 * std::log(2.0) / 10, 1e-5);
  // Much later the hot part has cooled down: one region per node, keeping the later access.
  t.compact(1000 * kSec);
  EXPECT_EQ(t.region_count(), 2U);
  EXPECT_EQ(t.at(kBase, 1000 * kSec)->last_access, to_tick(kSec));
  EXPECT_EQ(t.at(kBase + 95 * kPageSize, 1000 * kSec)->node, 1);
  EXPECT_EQ(t.tracked_bytes(), 100 * kPageSize);
}

TEST(Heat, AnAccessSoonAfterADemotionIsAMisdemotionAndStrikes) {
  HeatTable t({.half_life = 10 * kSec, .misdemotion_window = 10 * kSec});
  const AddrRange two{kBase, kBase + 2 * kPageSize};
  t.track(two, 0, 0);
  t.mark_moved(two, 1, 100 * kSec, true);
  auto u = t.at(kBase, 100 * kSec);
  ASSERT_TRUE(u);
  EXPECT_TRUE(u->demoted);
  EXPECT_FALSE(u->touched);
  // Touched 3 s after the demotion: evidence to promote, but one touch is not yet
  // a mis-demotion; the other page stays demoted.
  t.add(AccessSample{.addr = kBase, .time = 103 * kSec});
  u = t.at(kBase, 103 * kSec);
  EXPECT_FALSE(u->demoted);
  EXPECT_TRUE(u->touched);
  EXPECT_EQ(u->strikes, 0U);
  EXPECT_TRUE(t.at(kBase + kPageSize, 103 * kSec)->demoted);
  HeatEvents ev = t.take_events();
  EXPECT_EQ(ev.misdemoted_bytes, 0U);
  EXPECT_EQ(ev.touched_demoted_pages, 1U);
  // Promoted, and touched again: the return was real, judged by its first touch's time.
  t.mark_moved({kBase, kBase + kPageSize}, 0, 103 * kSec);
  t.add(AccessSample{.addr = kBase, .time = 115 * kSec});
  EXPECT_EQ(t.at(kBase, 115 * kSec)->strikes, 1U);
  ev = t.take_events();
  EXPECT_EQ(ev.misdemoted_bytes, kPageSize);
  EXPECT_EQ(ev.reactivated_bytes, 0U);
  EXPECT_EQ(ev.touched_demoted_pages, 0U);
  EXPECT_EQ(t.take_events().misdemoted_bytes, 0U) << "taken once";
  // Demoted again and touched again soon, twice in one sample: a second strike in a row.
  t.mark_moved(two, 1, 200 * kSec, true);
  t.add(AccessSample{.addr = kBase, .time = 201 * kSec, .weight = 2});
  EXPECT_EQ(t.at(kBase, 201 * kSec)->strikes, 2U);
  // Demoted and touched twice only after the window: a reactivation, strikes reset.
  t.mark_moved(two, 1, 300 * kSec, true);
  t.add(AccessSample{.addr = kBase, .time = 320 * kSec});
  t.add(AccessSample{.addr = kBase, .time = 321 * kSec});
  EXPECT_EQ(t.at(kBase, 321 * kSec)->strikes, 0U);
  ev = t.take_events();
  EXPECT_EQ(ev.misdemoted_bytes, kPageSize);
  EXPECT_EQ(ev.reactivated_bytes, kPageSize);
  // A promotion (not a demotion) leaves nothing to judge.
  t.mark_moved(two, 0, 400 * kSec, false);
  t.add(AccessSample{.addr = kBase + kPageSize, .time = 401 * kSec});
  t.add(AccessSample{.addr = kBase + kPageSize, .time = 402 * kSec});
  ev = t.take_events();
  EXPECT_EQ(ev.touched_demoted_pages, 0U);
  EXPECT_EQ(ev.misdemoted_bytes + ev.reactivated_bytes, 0U);
}

// One touch of a demoted page (a copy read once, a read a little past the rows
// in use) is weak evidence: unless a second follows before the next demotion,
// it is neither a mis-demotion nor a reactivation, and it adds no strike.
TEST(Heat, ATouchedOnceDemotedPageIsNeitherAMisdemotionNorAReturn) {
  HeatTable t({.half_life = 10 * kSec, .misdemotion_window = 10 * kSec});
  const AddrRange page{kBase, kBase + kPageSize};
  t.track(page, 0, 0);
  t.mark_moved(page, 1, 100 * kSec, true);
  t.add(AccessSample{.addr = kBase, .time = 101 * kSec});
  t.mark_moved(page, 0, 101 * kSec);        // promoted at the touch
  t.mark_moved(page, 1, 130 * kSec, true);  // idle again, demoted again: a one-off
  HeatEvents ev = t.take_events();
  EXPECT_EQ(ev.touched_demoted_pages, 1U);
  EXPECT_EQ(ev.misdemoted_bytes, 0U);
  EXPECT_EQ(ev.reactivated_bytes, 0U);
  EXPECT_EQ(t.at(kBase, 130 * kSec)->strikes, 0U);
  // Its next touch is the first of this demotion's, not the second of the last.
  t.add(AccessSample{.addr = kBase, .time = 131 * kSec});
  ev = t.take_events();
  EXPECT_EQ(ev.misdemoted_bytes, 0U);
  EXPECT_EQ(ev.touched_demoted_pages, 1U);
}

TEST(Heat, MemoryTouchedThenFoundElsewhereWasMovedByTheKernel) {
  HeatTable t({.misdemotion_window = 10 * kSec});
  const AddrRange page{kBase, kBase + kPageSize};
  t.track({kBase, kBase + 2 * kPageSize}, 0, 0);
  t.mark_moved({kBase, kBase + 2 * kPageSize}, 1, 10 * kSec, true);
  t.add(AccessSample{.addr = kBase, .time = 11 * kSec});
  t.set_node(page, 0);                                        // promoted in the fault path
  t.set_node({kBase + kPageSize, kBase + 2 * kPageSize}, 1);  // as kvtier left it
  const HeatEvents ev = t.take_events();
  EXPECT_EQ(ev.moved_by_kernel_bytes, kPageSize);
  EXPECT_EQ(ev.misdemoted_bytes, 0U) << "touched once so far";
  EXPECT_FALSE(t.at(kBase, 11 * kSec)->touched);
  t.add(AccessSample{.addr = kBase, .time = 12 * kSec});
  EXPECT_EQ(t.take_events().misdemoted_bytes, kPageSize) << "the second touch, in DRAM";
  EXPECT_TRUE(t.at(kBase + kPageSize, 11 * kSec)->demoted);
}

// A strong region report (at least the share asked of its checks) touches its
// pages like samples: a demoted page in it counts as touched again. A weak one
// only keeps its pages from going cold.
TEST(Heat, StrongRegionReportsTouchWeakOnesOnlyKeepWarm) {
  HeatTable t({.misdemotion_window = 10 * kSec, .region_touch_share = 0.5});
  t.track({kBase, kBase + 4 * kPageSize}, 0, 0);
  t.mark_moved({kBase, kBase + 4 * kPageSize}, 1, 45 * kSec, true);
  // 2 of 10 checks found it accessed: below half.
  t.add(RegionAccess{.range = {kBase, kBase + 2 * kPageSize},
                     .nr_accesses = 2,
                     .max_nr_accesses = 10,
                     .time = 50 * kSec});
  // 6 of 10: at least half.
  t.add(RegionAccess{.range = {kBase + 2 * kPageSize, kBase + 4 * kPageSize},
                     .nr_accesses = 6,
                     .max_nr_accesses = 10,
                     .time = 50 * kSec});
  const auto weak = t.at(kBase, 50 * kSec);
  const auto strong = t.at(kBase + 3 * kPageSize, 50 * kSec);
  EXPECT_EQ(weak->last_access, to_tick(50 * kSec)) << "weak: warm";
  EXPECT_FALSE(weak->touched);
  EXPECT_TRUE(weak->demoted);
  EXPECT_EQ(strong->last_access, to_tick(50 * kSec));
  EXPECT_TRUE(strong->touched);
  EXPECT_FALSE(strong->demoted);
  EXPECT_EQ(t.take_events().touched_demoted_pages, 2U);
  t.add(RegionAccess{.range = {kBase + 2 * kPageSize, kBase + 4 * kPageSize},
                     .nr_accesses = 6,
                     .max_nr_accesses = 10,
                     .time = 51 * kSec});
  const HeatEvents ev = t.take_events();
  EXPECT_EQ(ev.misdemoted_bytes, 2 * kPageSize) << "touched 5 s after its demotion, and again";
  EXPECT_EQ(ev.touched_demoted_pages, 0U);

  HeatTable never(HeatParams{});
  never.track({kBase, kBase + kPageSize}, 0, 0);
  never.add(RegionAccess{.range = {kBase, kBase + kPageSize},
                         .nr_accesses = 10,
                         .max_nr_accesses = 10,
                         .time = 50 * kSec});
  EXPECT_FALSE(never.at(kBase, 50 * kSec)->touched) << "region_touch_share 0: never";
}

// A buffer that grows forward (a KV cache appending rows): a sample at a page
// counts, at its time, for the pages never used since tracked in the
// frontier_bytes after it; used pages keep their own evidence; off at 0.
TEST(Heat, APageAccessedKeepsTheNeverUsedPagesJustPastItWarm) {
  HeatTable t({.half_life = 10 * kSec, .frontier_bytes = 4 * kPageSize});
  const auto page = [](std::uint64_t i) { return kBase + i * kPageSize; };
  t.track({page(0), page(16)}, 0, 0);
  t.add(AccessSample{.addr = page(5), .time = 1 * kSec});
  t.add(AccessSample{.addr = page(3), .time = 20 * kSec});
  const std::uint32_t at20 = to_tick(20 * kSec);
  EXPECT_TRUE(t.at(page(3), 20 * kSec)->touched);
  EXPECT_FALSE(t.at(page(3), 20 * kSec)->ahead) << "the accessed page itself is used";
  for (const std::uint64_t i : {4U, 6U, 7U}) {
    const auto u = t.at(page(i), 20 * kSec);
    EXPECT_EQ(u->last_access, at20) << "page " << i;
    EXPECT_TRUE(u->ahead) << "page " << i;
    EXPECT_FALSE(u->touched) << "page " << i << ": no evidence of its own";
    EXPECT_EQ(u->heat, 0.0F) << "page " << i << ": no heat of its own";
  }
  EXPECT_EQ(t.at(page(5), 20 * kSec)->last_access, to_tick(1 * kSec)) << "used: its own evidence";
  EXPECT_FALSE(t.at(page(5), 20 * kSec)->ahead);
  EXPECT_EQ(t.at(page(8), 20 * kSec)->last_access, to_tick(1 * kSec))
      << "4 pages past page 5's sample at 1 s, past page 3's at 20 s";
  EXPECT_EQ(t.at(page(10), 20 * kSec)->last_access, 0U) << "past both";
  // The frontier moves on: page 7 used now, 8 to 11 ahead; page 12 not.
  t.add(AccessSample{.addr = page(7), .time = 30 * kSec});
  EXPECT_FALSE(t.at(page(7), 30 * kSec)->ahead);
  EXPECT_TRUE(t.at(page(11), 30 * kSec)->ahead);
  EXPECT_EQ(t.at(page(11), 30 * kSec)->last_access, to_tick(30 * kSec));
  EXPECT_EQ(t.at(page(12), 30 * kSec)->last_access, 0U);
  // A late sample never makes a page look older.
  t.add(AccessSample{.addr = page(3), .time = 15 * kSec});
  EXPECT_EQ(t.at(page(4), 30 * kSec)->last_access, at20);
  // Across a chunk's end, onto a slow node: ahead there too, until kvtier moves it.
  const std::uint64_t edge = kBase + kHugePageSize;
  t.track({edge - kPageSize, edge}, 0, 0);
  t.track({edge, edge + 4 * kPageSize}, 1, 0);
  t.add(AccessSample{.addr = edge - kPageSize, .time = 40 * kSec});
  const auto slow = t.at(edge + kPageSize, 40 * kSec);
  EXPECT_TRUE(slow->ahead);
  EXPECT_EQ(slow->node, 1);
  t.mark_moved({edge, edge + 4 * kPageSize}, 0, 41 * kSec);
  EXPECT_FALSE(t.at(edge + kPageSize, 41 * kSec)->ahead) << "moved: no longer a candidate";
  // Off: nothing past the page changes.
  HeatTable off({.half_life = 10 * kSec});
  off.track({page(0), page(4)}, 0, 0);
  off.add(AccessSample{.addr = page(0), .time = 20 * kSec});
  EXPECT_EQ(off.at(page(1), 20 * kSec)->last_access, 0U);
  EXPECT_FALSE(off.at(page(1), 20 * kSec)->ahead);
}

}  // namespace
}  // namespace kvtier::policy
