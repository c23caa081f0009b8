#include "agent/movers/move_pages_mover.hpp"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "agent/movers/dry_run_mover.hpp"
#include "fixture.hpp"
#include "unit/fake_kernel.hpp"

namespace kvtier::agent {
namespace {

using testing::FakeKernel;

constexpr std::uint64_t kBase = 0x7f0000000000ULL;
constexpr Pid kPid = 4242;

std::uint64_t accounted(const MoveStats& s) {
  return s.moved + s.already_there + s.busy + s.pinned + s.not_present + s.gone + s.no_memory +
         s.permission + s.other + s.partial_huge;
}

class FixedHugeProbe final : public HugePageProbe {
 public:
  explicit FixedHugeProbe(std::vector<std::uint64_t> blocks) : blocks_(std::move(blocks)) {}
  Result<std::vector<std::uint64_t>> huge_blocks(Pid /*pid*/, AddrRange range) override {
    std::vector<std::uint64_t> out;
    for (auto b : blocks_) {
      if (b < range.end && b + kHugePageSize > range.start) out.push_back(b);
    }
    return out;
  }

 private:
  std::vector<std::uint64_t> blocks_;
};

struct Harness {
  FakeKernel kernel;
  TimeNs now = 1'000'000'000;

  MovePagesMover make(MovePagesConfig cfg, std::shared_ptr<HugePageProbe> huge = nullptr,
                      HostPaths host = {}) {
    return MovePagesMover(cfg, MovePagesDeps{.move_pages = kernel.fn(),
                                             .huge = std::move(huge),
                                             .clock = [this] { return now; },
                                             .host = std::move(host)});
  }
};

AddrRange pages_at(std::uint64_t first_page, std::uint64_t n) {
  return AddrRange{.start = kBase + first_page * kPageSize,
                   .end = kBase + (first_page + n) * kPageSize};
}

TEST(ClassifyStatus, EveryErrnoFamily) {
  EXPECT_EQ(classify_status(0), PageStatus::kOnNode);
  EXPECT_EQ(classify_status(3), PageStatus::kOnNode);
  EXPECT_EQ(classify_status(-EBUSY), PageStatus::kBusy);
  EXPECT_EQ(classify_status(-EAGAIN), PageStatus::kBusy);
  EXPECT_EQ(classify_status(-ENOENT), PageStatus::kNotPresent);
  EXPECT_EQ(classify_status(-EFAULT), PageStatus::kNotPresent);
  EXPECT_EQ(classify_status(-ENOMEM), PageStatus::kNoMemory);
  EXPECT_EQ(classify_status(-EACCES), PageStatus::kPermission);
  EXPECT_EQ(classify_status(-EPERM), PageStatus::kPermission);
  EXPECT_EQ(classify_status(-EIO), PageStatus::kOther);
}

TEST(MovePagesMover, MovesEveryPageInBatches) {
  Harness h;
  h.kernel.map(kBase, 1000, 0);
  auto mover = h.make({.batch_units = 256});
  const AddrRange r[] = {pages_at(0, 1000)};
  const auto st = mover.move(kPid, r, 1);
  EXPECT_EQ(st.requested, 1000U);
  EXPECT_EQ(st.moved, 1000U);
  EXPECT_EQ(st.bytes_moved, 1000U * kPageSize);
  EXPECT_EQ(accounted(st), st.requested);
  EXPECT_EQ(h.kernel.move_sizes, (std::vector<std::size_t>{256, 256, 256, 232}));
  // One status query and one move per batch when nothing fails.
  EXPECT_EQ(st.calls, 8U);
  for (std::uint64_t i = 0; i < 1000; ++i) EXPECT_EQ(h.kernel.node_of[kBase + i * kPageSize], 1);
}

TEST(MovePagesMover, AlreadyThereAndAbsentPagesAreNotMoved) {
  Harness h;
  h.kernel.map(kBase, 10, 1);                   // already on the target
  h.kernel.map(kBase + 10 * kPageSize, 10, 0);  // to move
  // pages 20..29 never touched
  auto mover = h.make({});
  const AddrRange r[] = {pages_at(0, 30)};
  const auto st = mover.move(kPid, r, 1);
  EXPECT_EQ(st.already_there, 10U);
  EXPECT_EQ(st.moved, 10U);
  EXPECT_EQ(st.not_present, 10U);
  EXPECT_EQ(accounted(st), 30U);
  ASSERT_EQ(h.kernel.move_sizes.size(), 1U);
  EXPECT_EQ(h.kernel.move_sizes[0], 10U) << "only pages elsewhere are passed to the move";
}

TEST(MovePagesMover, PinnedPageIsRememberedAndNotRetried) {
  Harness h;
  h.kernel.map(kBase, 64, 0);
  const std::uint64_t pinned_page = kBase + 5 * kPageSize;
  h.kernel.pinned.insert(pinned_page);
  auto mover = h.make({.max_attempts = 3});
  const AddrRange r[] = {pages_at(0, 64)};
  const auto st = mover.move(kPid, r, 1);
  EXPECT_EQ(st.pinned, 1U);
  EXPECT_EQ(st.moved, 63U);
  EXPECT_EQ(st.busy, 0U);
  EXPECT_EQ(accounted(st), 64U);
  EXPECT_EQ(mover.pinned().count(kPid), 1U);
  EXPECT_EQ(h.kernel.move_calls, 3);
  // The loop hears of it by address, once.
  const auto refused = mover.take_refused();
  ASSERT_EQ(refused.size(), 1U);
  EXPECT_EQ(refused[0].first, kPid);
  EXPECT_EQ(refused[0].second, (AddrRange{pinned_page, pinned_page + kPageSize}));
  EXPECT_TRUE(mover.take_refused().empty());

  // Moving back and forth again: the pinned page is skipped without a call.
  const auto back = mover.move(kPid, r, 0);
  EXPECT_EQ(back.pinned, 1U);
  EXPECT_EQ(back.moved, 63U);
  EXPECT_EQ(h.kernel.move_calls, 4) << "no retry loop on the pinned page";
  EXPECT_EQ(mover.take_refused().size(), 1U) << "skipped as pinned: told again";
  for (auto n : h.kernel.move_sizes) EXPECT_LE(n, 64U);
  EXPECT_EQ(h.kernel.move_sizes.back(), 63U);
}

TEST(MovePagesMover, PinnedMarkExpires) {
  Harness h;
  h.kernel.map(kBase, 4, 0);
  h.kernel.pinned.insert(kBase);
  auto mover = h.make({.pinned_ttl_ns = 10'000'000'000ULL});
  const AddrRange r[] = {pages_at(0, 4)};
  EXPECT_EQ(mover.move(kPid, r, 1).pinned, 1U);
  h.kernel.pinned.clear();  // the buffer was unregistered
  h.now += 11'000'000'000ULL;
  const auto st = mover.move(kPid, r, 1);
  EXPECT_EQ(st.moved, 1U);
  EXPECT_EQ(st.already_there, 3U);
  EXPECT_EQ(st.pinned, 0U);
}

TEST(MovePagesMover, TransientBusyIsRetriedPersistentBusyIsNotPinned) {
  Harness h;
  h.kernel.map(kBase, 8, 0);
  h.kernel.busy_calls[kBase + kPageSize] = 1;         // busy once
  h.kernel.busy_calls[kBase + 2 * kPageSize] = 1000;  // busy on every call
  auto mover = h.make({.max_attempts = 3});
  const AddrRange r[] = {pages_at(0, 8)};
  const auto st = mover.move(kPid, r, 1);
  EXPECT_EQ(st.moved, 7U);
  EXPECT_EQ(st.busy, 1U);
  EXPECT_EQ(st.pinned, 0U);
  EXPECT_EQ(st.last_errno, EBUSY);
  EXPECT_EQ(mover.pinned().size(), 0U);
  EXPECT_EQ(accounted(st), 8U);
}

TEST(MovePagesMover, FullNodeStopsDemotionAndLatches) {
  Harness h;
  h.kernel.map(kBase, 100, 0);
  h.kernel.free_pages[1] = 30;
  auto mover = h.make({.batch_units = 16, .node_full_retry_ns = 60'000'000'000ULL});
  const AddrRange r[] = {pages_at(0, 100)};
  const auto st = mover.move(kPid, r, 1);
  EXPECT_EQ(st.moved, 30U);
  EXPECT_EQ(st.no_memory, 70U);
  EXPECT_EQ(st.last_errno, ENOMEM);
  EXPECT_EQ(accounted(st), 100U);
  EXPECT_TRUE(mover.node_full().is_full(1, h.now));
  std::uint64_t on_node1 = 0;
  for (const auto& [a, n] : h.kernel.node_of) on_node1 += n == 1 ? 1 : 0;
  EXPECT_EQ(on_node1, 30U) << "nothing lost, nothing double counted";

  const int calls_before = h.kernel.calls;
  const auto again = mover.move(kPid, r, 1);
  EXPECT_EQ(again.no_memory, 100U);
  EXPECT_EQ(h.kernel.calls, calls_before) << "latched: no call to a full node";
  // Promotion to node 0 is unaffected.
  const auto up = mover.move(kPid, r, 0);
  EXPECT_EQ(up.moved, 30U);
  EXPECT_EQ(up.already_there, 70U);
  // After the retry delay demotion is tried again.
  h.now += 61'000'000'000ULL;
  h.kernel.free_pages[1] = 1000;
  EXPECT_EQ(mover.move(kPid, r, 1).moved, 100U);
}

TEST(MovePagesMover, ProcessGoneMidWayCountsTheRestAsGone) {
  Harness h;
  h.kernel.map(kBase, 100, 0);
  h.kernel.gone_after_calls = 3;  // query, move, query, then ESRCH
  auto mover = h.make({.batch_units = 25});
  mover.pinned().mark(kPid, kBase + 99 * kPageSize, h.now);
  const AddrRange r[] = {pages_at(0, 100)};
  const auto st = mover.move(kPid, r, 1);
  EXPECT_EQ(st.moved, 25U);
  EXPECT_EQ(st.pinned, 1U);
  EXPECT_EQ(st.gone, 74U);
  EXPECT_EQ(st.last_errno, ESRCH);
  EXPECT_EQ(accounted(st), 100U);
  EXPECT_EQ(mover.pinned().count(kPid), 0U) << "a gone pid's marks are dropped";
}

TEST(MovePagesMover, ZombieEinvalCountsAsGone) {
  const std::string stat = "proc/" + std::to_string(kPid) + "/stat";
  kvtier::testing::Fixture root;
  root.write(stat, std::to_string(kPid) + " (a b) Z 1 2 3\n");
  Harness h;
  h.kernel.errno_always = EINVAL;
  auto mover = h.make({}, nullptr, root.paths());
  const AddrRange r[] = {pages_at(0, 10)};
  const auto st = mover.move(kPid, r, 1);
  EXPECT_EQ(st.gone, 10U);
  // Exiting, mm already released, not yet a zombie: PF_EXITING (0x4) in flags.
  root.write(stat, std::to_string(kPid) + " (a) b) R 1 2 3 0 -1 4194308 0 0\n");
  EXPECT_EQ(mover.move(kPid, r, 1).gone, 10U);
  root.write(stat, std::to_string(kPid) + " (a) R 1 2 3 0 -1 4194560 0 0\n");
  const auto alive = mover.move(kPid, r, 1);
  EXPECT_EQ(alive.other, 10U) << "EINVAL from a live process is not 'gone'";
}

TEST(MovePagesMover, PermissionErrors) {
  Harness h;
  h.kernel.errno_always = EPERM;
  auto mover = h.make({});
  const AddrRange r[] = {pages_at(0, 10)};
  const auto st = mover.move(kPid, r, 1);
  EXPECT_EQ(st.permission, 10U);
  EXPECT_EQ(st.last_errno, EPERM);
}

TEST(MovePagesMover, SharedPagesNeedMoveAll) {
  Harness h;
  h.kernel.map(kBase, 4, 0);
  h.kernel.shared.insert(kBase + kPageSize);
  const AddrRange r[] = {pages_at(0, 4)};
  auto plain = h.make({});
  const auto st = plain.move(kPid, r, 1);
  EXPECT_EQ(st.permission, 1U);
  EXPECT_EQ(st.moved, 3U);
  auto all = h.make({.move_shared = true});
  const auto st2 = all.move(kPid, r, 1);
  EXPECT_EQ(st2.moved, 1U);
  EXPECT_EQ(st2.already_there, 3U);
}

TEST(MovePagesMover, HugePagesMoveAsOneUnit) {
  Harness h;
  const std::uint64_t block = kBase;  // kBase is 2 MiB aligned
  h.kernel.node_of[block] = 0;
  h.kernel.pages_of[block] = 512;
  h.kernel.map(block + kHugePageSize, 16, 0);  // small pages after it
  auto mover = h.make({}, std::make_shared<FixedHugeProbe>(std::vector<std::uint64_t>{block}));
  const AddrRange r[] = {pages_at(0, 512 + 16)};
  const auto st = mover.move(kPid, r, 1);
  EXPECT_EQ(st.requested, 528U);
  EXPECT_EQ(st.moved, 528U);
  EXPECT_EQ(st.bytes_moved, 528U * kPageSize);
  ASSERT_EQ(h.kernel.move_sizes.size(), 1U);
  EXPECT_EQ(h.kernel.move_sizes[0], 17U) << "the huge page is passed once, by its head";
}

TEST(MovePagesMover, LocatedMovesSkipTheFirstLook) {
  // The control loop has just read where these pages are: no status query
  // before the move, one move call per batch.
  Harness h;
  h.kernel.map(kBase, 1000, 0);
  auto mover = h.make({.batch_units = 256});
  const AddrRange r[] = {pages_at(0, 1000)};
  const auto st = mover.move_located(kPid, r, 1, {});
  EXPECT_EQ(st.moved, 1000U);
  EXPECT_EQ(accounted(st), st.requested);
  EXPECT_EQ(st.calls, 4U);
  EXPECT_EQ(h.kernel.calls, h.kernel.move_calls) << "no query";
}

TEST(MovePagesMover, LocatedMovesLeaveAPartlyCoveredHugePage) {
  // Block 0 is huge and the plan covers 17 of its pages: moving its head
  // would move all 512, so it stays. Block 1 is huge and covered whole.
  Harness h;
  const std::uint64_t b0 = kBase;
  const std::uint64_t b1 = kBase + kHugePageSize;
  for (const auto b : {b0, b1}) {
    h.kernel.node_of[b] = 0;
    h.kernel.pages_of[b] = 512;
  }
  auto mover = h.make({});
  const AddrRange r[] = {pages_at(495, 17 + 512)};
  const std::uint64_t huge[] = {b0, b1};
  const auto st = mover.move_located(kPid, r, 1, huge);
  EXPECT_EQ(st.requested, 529U);
  EXPECT_EQ(st.partial_huge, 17U);
  EXPECT_EQ(st.moved, 512U);
  EXPECT_EQ(accounted(st), st.requested);
  EXPECT_EQ(h.kernel.node_of[b0], 0) << "the partly planned huge page stays";
  EXPECT_EQ(h.kernel.node_of[b1], 1);
  ASSERT_EQ(h.kernel.move_sizes.size(), 1U);
  EXPECT_EQ(h.kernel.move_sizes[0], 1U) << "the whole huge page by its head";
}

TEST(PinnedSet, MarkExpireForget) {
  PinnedSet set(100);
  set.mark(1, 0x1000, 0);
  set.mark(1, 0x2000, 0);
  set.mark(2, 0x1000, 50);
  EXPECT_TRUE(set.contains(1, 0x1000, 99));
  EXPECT_FALSE(set.contains(1, 0x3000, 0));
  EXPECT_FALSE(set.contains(1, 0x1000, 100)) << "expired";
  EXPECT_EQ(set.count(1), 1U);
  set.forget(1);
  EXPECT_EQ(set.count(1), 0U);
  EXPECT_TRUE(set.contains(2, 0x1000, 60));
}

// ENOMEM on a node with CPUs (DRAM: a promotion) is momentary; the next call
// tries again. A CPU-less node (CXL) latches.
TEST(MovePagesMover, FullNodeWithCpusDoesNotLatch) {
  ::kvtier::testing::Fixture sys;
  sys.write("sys/devices/system/node/node0/cpulist", "0-1\n")
      .write("sys/devices/system/node/node1/cpulist", "\n");
  Harness h;
  h.kernel.map(kBase, 100, 1);
  h.kernel.free_pages[0] = 30;
  auto mover = h.make({.batch_units = 16}, nullptr, sys.paths());
  const AddrRange r[] = {pages_at(0, 100)};
  const auto st = mover.move(kPid, r, 0);
  EXPECT_EQ(st.moved, 30U);
  EXPECT_EQ(st.no_memory, 70U);
  EXPECT_FALSE(mover.node_full().is_full(0, h.now));
  h.kernel.free_pages[0] = 1000;
  const int calls_before = h.kernel.calls;
  EXPECT_EQ(mover.move(kPid, r, 0).moved, 70U);
  EXPECT_GT(h.kernel.calls, calls_before);

  h.kernel.free_pages[1] = 10;
  EXPECT_EQ(mover.move(kPid, r, 1).moved, 10U);
  EXPECT_TRUE(mover.node_full().is_full(1, h.now)) << "the CPU-less node latches";
}

TEST(NodeFullLatch, LatchWarnsOnceAndExpires) {
  NodeFullLatch latch(1000);
  EXPECT_FALSE(latch.is_full(1, 0));
  EXPECT_TRUE(latch.latch(1, 0));
  EXPECT_FALSE(latch.latch(1, 10)) << "already latched: no second warning";
  EXPECT_TRUE(latch.is_full(1, 999));
  EXPECT_FALSE(latch.is_full(2, 0));
  EXPECT_FALSE(latch.is_full(1, 1000));
  EXPECT_TRUE(latch.latch(1, 2000));
  latch.clear(1);
  EXPECT_FALSE(latch.is_full(1, 2001));
}

TEST(SplitUnits, SmallAndHugePages) {
  const std::uint64_t b = kBase;
  const std::uint64_t huge[] = {b + kHugePageSize};
  // Unaligned range from the middle of page 510 to 10 pages into the huge block.
  const AddrRange r[] = {
      AddrRange{.start = b + 510 * kPageSize + 7, .end = b + kHugePageSize + 10 * kPageSize - 1}};
  const auto units = split_units(r, huge);
  ASSERT_EQ(units.size(), 3U);
  EXPECT_EQ(units[0], (MoveUnit{.addr = b + 510 * kPageSize, .pages = 1}));
  EXPECT_EQ(units[1], (MoveUnit{.addr = b + 511 * kPageSize, .pages = 1}));
  EXPECT_EQ(units[2], (MoveUnit{.addr = b + kHugePageSize, .pages = 10}));
  EXPECT_EQ(count_pages(r), 12U);
  const AddrRange whole[] = {AddrRange{.start = b, .end = b + 3 * kHugePageSize}};
  const std::uint64_t two[] = {b, b + 2 * kHugePageSize};
  const auto u2 = split_units(whole, two);
  ASSERT_EQ(u2.size(), 2U + 512U);
  EXPECT_EQ(u2.front().pages, 512U);
  EXPECT_EQ(u2.back(), (MoveUnit{.addr = b + 2 * kHugePageSize, .pages = 512}));
  const AddrRange empty[] = {AddrRange{.start = b, .end = b}};
  EXPECT_TRUE(split_units(empty, {}).empty());
  // Skipping partly covered huge blocks: their covered pages are counted.
  std::uint64_t skipped = 0;
  const auto u3 = split_units(r, huge, PartialHuge::kSkip, &skipped);
  ASSERT_EQ(u3.size(), 2U);
  EXPECT_EQ(skipped, 10U);
  EXPECT_EQ(split_units(whole, two, PartialHuge::kSkip, &skipped).size(), u2.size());
  EXPECT_EQ(skipped, 10U) << "whole huge blocks are not skipped";
}

TEST(DryRunMover, CountsAndMovesNothing) {
  FakeKernel kernel;
  kernel.map(kBase, 10, 0);
  kernel.map(kBase + 10 * kPageSize, 5, 1);
  DryRunMover mover(kernel.fn());
  const AddrRange r[] = {pages_at(0, 20)};
  const auto st = mover.move(kPid, r, 1);
  EXPECT_EQ(st.moved, 10U);
  EXPECT_EQ(st.already_there, 5U);
  EXPECT_EQ(st.not_present, 5U);
  EXPECT_EQ(accounted(st), 20U);
  EXPECT_EQ(kernel.move_calls, 0);
  EXPECT_EQ(kernel.node_of[kBase], 0);
  kernel.gone_after_calls = 0;
  EXPECT_EQ(mover.move(kPid, r, 1).gone, 20U);
}

}  // namespace
}  // namespace kvtier::agent
