#include "agent/loop/residency_check.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "agent/host/host_paths.hpp"
#include "agent/host/residency.hpp"
#include "agent/loop/target_set.hpp"
#include "policy/heat.hpp"
#include "unit/fake_kernel.hpp"

namespace kvtier::agent {
namespace {

constexpr std::uint64_t kBase = 0x7f0000000000ULL;  // 2 MiB aligned
constexpr std::uint64_t kChunk = kHugePageSize;
constexpr std::uint64_t kChunkPages = kChunk / kPageSize;
constexpr TimeNs kNow = 1'000'000'000'000;

// A target of 8 chunks (16 MiB) on node 1 as the first full read left it, and the kernel
// agreeing; the query counts the pages it is asked about.
struct Fixture {
  testing::FakeKernel kernel;
  std::uint64_t pages_asked = 0;
  std::set<std::uint64_t> asked;
  ResidencyReader reader{
      [this](Pid pid, std::span<void*> p, const int* n, std::span<int> s, int f) {
        pages_asked += p.size();
        for (void* a : p) asked.insert(testing::FakeKernel::addr(a));
        return kernel(pid, p, n, s, f);
      },
      4096, nullptr};
  Target t;

  Fixture() {
    t.pid = 42;
    t.heat = std::make_unique<policy::HeatTable>();
    t.vmas = {{kBase, kBase + 8 * kChunk}};
    t.heat->track(t.vmas[0], 1, kNow);
    kernel.map(kBase, 8 * kChunkPages, 1);
    t.last_full_residency = kNow;
  }
  PageMap update(bool check, std::uint64_t turn, ResidencyReadCount* count = nullptr,
                 std::optional<std::uint64_t> kernel_moved = std::nullopt) {
    pages_asked = 0;
    asked.clear();
    std::string error;
    PageMap m = update_residency(reader, t, kNow, check, turn, kernel_moved, &error, count);
    EXPECT_TRUE(error.empty()) << error;
    t.bytes_per_node = t.heat->bytes_per_node(&t.not_present_bytes);
    return m;
  }
};

std::uint64_t page(std::uint64_t chunk, std::uint64_t i) {
  return kBase + chunk * kChunk + i * kPageSize;
}

// Issue 33: a check reads one page per 2 MiB of alike pages and every page with its own
// state, not the pool.
TEST(ResidencyCheck, AsksOnePagePerChunkOfAlikePagesAndEveryPageWithItsOwnState) {
  Fixture f;
  // Page-level evidence in chunk 2: its 512 pages get their own state.
  f.t.heat->add(AccessSample{.pid = 42, .addr = page(2, 7), .time = kNow, .weight = 1});
  const ResidencyProbes p = residency_probes(*f.t.heat, kNow, 0);
  EXPECT_EQ(p.probes.size(), 7U);
  ASSERT_EQ(p.exact.size(), 1U);
  EXPECT_EQ(p.exact[0].start, page(2, 0));
  EXPECT_EQ(p.exact[0].end, page(3, 0));
  for (const auto& probe : p.probes) {
    EXPECT_EQ(probe.node, 1);
    EXPECT_TRUE(probe.part.contains(probe.page));
    EXPECT_EQ(probe.part.bytes(), kChunk);
  }

  ResidencyReadCount c;
  f.update(true, 0, &c);
  EXPECT_EQ(f.pages_asked, 7 + kChunkPages) << "of " << 8 * kChunkPages;
  EXPECT_EQ(c.pages, 7 + kChunkPages);
  EXPECT_EQ(c.probes, 7U);
  EXPECT_EQ(c.blocks_reread, 0U);
  EXPECT_EQ(f.t.bytes_per_node.at(1), 8 * kChunk);
  EXPECT_EQ(f.t.not_present_bytes, 0U);
}

// A probe that finds its page elsewhere (the kernel's reclaim demoted or freed part of a
// chunk) has its whole block read: the table and the bytes per node follow the kernel.
TEST(ResidencyCheck, ABlockWhoseProbeDisagreesIsReadWhole) {
  Fixture f;
  // The kernel put chunk 5 on node 0 and freed chunk 6's pages.
  f.kernel.map(page(5, 0), kChunkPages, 0);
  for (std::uint64_t i = 0; i < kChunkPages; ++i) f.kernel.node_of.erase(page(6, i));
  ResidencyReadCount c;
  const PageMap m = f.update(true, 3, &c);
  EXPECT_EQ(c.blocks_reread, 2U);
  EXPECT_EQ(f.pages_asked, 8 + 2 * kChunkPages);
  ASSERT_EQ(m.runs.size(), 2U);
  EXPECT_EQ(m.runs[0].node, 0);
  EXPECT_EQ(m.runs[1].node, -1);
  EXPECT_EQ(f.t.heat->at(page(5, 100), kNow)->node, 0);
  EXPECT_EQ(f.t.heat->at(page(6, 100), kNow)->node, -1);
  EXPECT_EQ(f.t.bytes_per_node.at(0), kChunk);
  EXPECT_EQ(f.t.bytes_per_node.at(1), 6 * kChunk);
  EXPECT_EQ(f.t.not_present_bytes, kChunk);

  // Chunk 6, now of unknown node, is read whole at every check until its pages are back.
  f.update(true, 4, &c);
  EXPECT_EQ(c.blocks_reread, 0U);
  EXPECT_EQ(f.pages_asked, 7 + kChunkPages);
  f.kernel.map(page(6, 0), kChunkPages, 0);
  f.update(true, 5);
  EXPECT_EQ(f.t.bytes_per_node.at(0), 2 * kChunk);
  EXPECT_EQ(f.t.not_present_bytes, 0U);
}

// Successive checks ask about different pages of a block, all of them in 512 checks: a
// change to part of a chunk is found, later rather than never.
TEST(ResidencyCheck, SuccessiveChecksVisitEveryPageOfABlock) {
  Fixture f;
  std::set<std::uint64_t> seen;
  for (std::uint64_t turn = 0; turn < kChunkPages; ++turn) {
    for (const auto& p : residency_probes(*f.t.heat, kNow, turn).probes) {
      if (p.part.start == page(0, 0)) seen.insert(p.page);
    }
  }
  EXPECT_EQ(seen.size(), kChunkPages);
  // Neighbouring blocks are not asked about at the same offset.
  const ResidencyProbes p = residency_probes(*f.t.heat, kNow, 0);
  EXPECT_NE(p.probes[0].page - p.probes[0].part.start, p.probes[1].page - p.probes[1].part.start);
}

// Between checks only the ranges to read again are read (new mappings, a move's leftovers),
// and they are cleared.
TEST(ResidencyCheck, BetweenChecksOnlyTheRangesToReadAgain) {
  Fixture f;
  f.kernel.map(page(1, 10), 4, 0);
  f.t.reread = {{page(1, 8), page(1, 16)}, {page(1, 0), page(1, 9)}};
  const PageMap m = f.update(false, 0);
  EXPECT_EQ(f.pages_asked, 16U) << "the two ranges joined, each page once";
  EXPECT_TRUE(f.t.reread.empty());
  EXPECT_EQ(f.t.heat->at(page(1, 11), kNow)->node, 0);
  EXPECT_EQ(f.t.bytes_per_node.at(0), 4 * kPageSize);
  EXPECT_EQ(m.runs.size(), 3U);
}

// While the kernel moved nothing since the target's last check (its demotions and fault-path
// promotions, host-wide), the pages with their own state are probed one per block too: the
// pages it did move were sampled (the faults source) or moved by kvtier (the mover).
TEST(ResidencyCheck, PagesWithEvidenceAreProbedWhileTheKernelMovesNothing) {
  Fixture f;
  f.t.heat->add(AccessSample{.pid = 42, .addr = page(2, 7), .time = kNow, .weight = 1});
  ResidencyReadCount c;
  f.update(true, 0, &c, 100);
  EXPECT_TRUE(c.evidence_exact) << "no count at the last check";
  EXPECT_EQ(f.pages_asked, 7 + kChunkPages);
  f.update(true, 1, &c, 100);
  EXPECT_FALSE(c.evidence_exact);
  EXPECT_EQ(f.pages_asked, 8U) << "one page per block, the chunk with evidence too";
  EXPECT_EQ(c.probes, 8U);
  // One of chunk 2's pages went to node 0 unseen, at the page its probe asks about: the
  // block is read whole.
  const auto probes = residency_probes(*f.t.heat, kNow, 2, false);
  const auto in2 = std::ranges::find_if(probes.probes, [](const auto& p) {
    return p.part.start >= page(2, 0) && p.part.start < page(3, 0);
  });
  ASSERT_NE(in2, probes.probes.end());
  f.kernel.node_of[in2->page] = 0;
  f.update(true, 2, &c, 100);
  EXPECT_EQ(c.blocks_reread, 1U);
  EXPECT_EQ(f.pages_asked, 8 + kChunkPages);
  EXPECT_EQ(f.t.heat->at(in2->page, kNow)->node, 0);
  // The kernel demoted something somewhere: the pages with evidence are read in full.
  f.update(true, 3, &c, 101);
  EXPECT_TRUE(c.evidence_exact);
  EXPECT_EQ(f.pages_asked, 7 + kChunkPages);
  f.update(true, 4, &c, std::nullopt);
  EXPECT_TRUE(c.evidence_exact) << "not known: as if it had";
}

// /proc/vmstat: the kernel's demotions and fault-path promotions summed; a kernel without
// demotion counters gives nothing (the check then reads the pages with evidence in full).
TEST(ResidencyCheck, KernelMovesAreTheDemotionAndPromotionCounters) {
  const auto root =
      std::filesystem::temp_directory_path() / ("kvtier-kmoves-" + std::to_string(::getpid()));
  std::filesystem::create_directories(root / "proc");
  const auto host = HostPaths::under(root.string());
  EXPECT_EQ(kernel_moves(host), std::nullopt) << "no vmstat";
  std::ofstream(root / "proc/vmstat") << "nr_free_pages 5\npgpromote_success 7\n"
                                         "pgdemote_kswapd 3\npgdemote_direct 2\n"
                                         "pgmigrate_success 1000\n";
  EXPECT_EQ(kernel_moves(host), 12U);
  std::ofstream(root / "proc/vmstat") << "nr_free_pages 5\npgpromote_success 7\n";
  EXPECT_EQ(kernel_moves(host), std::nullopt) << "no demotion counters";
  std::filesystem::remove_all(root);
}

// A target larger than a check's bound: its blocks are probed over probe_share().every checks,
// each exactly once in them, with the probe the check of every block would have made (the
// same page at the same turn, the same part, the same node): a bounded sample of the memory
// without evidence, and none of it left out.
TEST(ResidencyCheck, ALargeTargetIsProbedInSharesThatCoverEveryBlockOnce) {
  constexpr std::uint64_t kBlocks = kCheckProbeBlocks + 5;
  policy::HeatTable heat;
  heat.track({kBase, kBase + kBlocks * kChunk}, 1, kNow);
  // Pages with their own state in three blocks: two on node 0, one partly of no known node.
  for (const std::uint64_t b : {std::uint64_t{3}, std::uint64_t{4}, kBlocks - 1}) {
    heat.add(AccessSample{.pid = 42, .addr = page(b, 9), .time = kNow, .weight = 1});
  }
  heat.set_node({page(3, 0), page(5, 0)}, 0);
  heat.set_node({page(kBlocks - 1, 0), page(kBlocks - 1, 0) + 9 * kPageSize}, -1);
  EXPECT_EQ(probe_share(kCheckProbeBlocks * kChunk, 7).every, 1U);
  const ProbeShare first = probe_share(kBlocks * kChunk, 0);
  ASSERT_EQ(first.every, 2U);
  EXPECT_EQ(probe_share(kBlocks * kChunk, 5).at, 1U);
  for (const bool exact : {true, false}) {
    constexpr std::uint64_t kTurn = 11;
    const ResidencyProbes all = residency_probes(heat, kNow, kTurn, exact);
    std::vector<ResidencyProbes::Probe> shared;
    for (std::uint64_t check = 0; check < first.every; ++check) {
      const ProbeShare share = probe_share(kBlocks * kChunk, check);
      const ResidencyProbes p = residency_probes(heat, kNow, kTurn, exact, share);
      EXPECT_LE(p.probes.size(), kCheckProbeBlocks);
      EXPECT_EQ(p.exact, all.exact) << "what is read in full is not sampled";
      for (const auto& probe : p.probes) {
        EXPECT_TRUE(share.probed(probe.page));
        shared.push_back(probe);
      }
    }
    std::ranges::sort(shared, {}, &ResidencyProbes::Probe::page);
    ASSERT_EQ(shared.size(), all.probes.size()) << "exact " << exact;
    for (std::size_t i = 0; i < shared.size(); ++i) {
      EXPECT_EQ(shared[i].page, all.probes[i].page);
      EXPECT_EQ(shared[i].part.start, all.probes[i].part.start);
      EXPECT_EQ(shared[i].part.end, all.probes[i].part.end);
      EXPECT_EQ(shared[i].node, all.probes[i].node);
    }
  }
}

}  // namespace
}  // namespace kvtier::agent
