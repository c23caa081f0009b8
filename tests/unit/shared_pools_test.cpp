// Shared pools (issue 37): which mappings are pools, one owner per pool among
// the targets that map it, and the sharers' evidence turned into the owner's.
// Over /proc/PID/maps files in a fixture tree; the same runs for real in
// tests/vm/shared_pool.sh.

#include "agent/loop/shared_pools.hpp"

#include <gtest/gtest.h>

#include <cerrno>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "agent/host/move_pages_call.hpp"
#include "agent/host/procfs.hpp"
#include "fixture.hpp"
#include "policy/types.hpp"

namespace kvtier::agent {
namespace {

using testing::Fixture;

constexpr std::uint64_t kMiB = 1ULL << 20;

// Three workers of one server. 100 maps the whole 8 MiB memfd pool; 200 maps it
// twice (all of it, and its second half again, from offset 4 MiB) and a
// /dev/shm pool of its own; 300 maps nothing shared. Around them: a private
// file, a read-only shared file, a shared memfd under 1 MiB and anonymous memory.
constexpr std::string_view kMaps100 =
    "55d0c0a00000-55d0c0a2c000 r--p 00000000 fe:01 1835345   /usr/bin/python3\n"
    "7f0000000000-7f0000400000 rw-p 00000000 00:00 0 \n"
    "7f1000000000-7f1000800000 rw-s 00000000 00:01 2048       /memfd:kv-pool (deleted)\n"
    "7f2000000000-7f2000010000 rw-s 00000000 00:01 2049       /memfd:small (deleted)\n"
    "7f3000000000-7f3000200000 r--s 00000000 fe:01 77         /usr/share/model.bin\n";
constexpr std::string_view kMaps200 =
    "7e5000000000-7e5000800000 rw-s 00000000 00:01 2048       /memfd:kv-pool (deleted)\n"
    "7e6000000000-7e6000400000 rw-s 00400000 00:01 2048       /memfd:kv-pool (deleted)\n"
    "7e7000000000-7e7000200000 rw-s 00000000 00:1a 31         /dev/shm/psm_kv\n"
    "7e8000000000-7e8000200000 rw-p 00000000 fe:01 88         /var/lib/cache.bin\n";
constexpr std::string_view kMaps300 = "7f0000000000-7f0000400000 rw-p 00000000 00:00 0 \n";

std::map<Pid, std::vector<MapEntry>> read_all(const Fixture& host, std::vector<Pid> pids) {
  std::map<Pid, std::vector<MapEntry>> out;
  for (const Pid pid : pids) {
    auto m = read_maps(host.paths(), pid);
    EXPECT_TRUE(m) << m.error().message;
    if (m) out[pid] = std::move(*m);
  }
  return out;
}

Fixture workers() {
  Fixture host;
  host.write("proc/100/maps", std::string(kMaps100))
      .write("proc/200/maps", std::string(kMaps200))
      .write("proc/300/maps", std::string(kMaps300));
  return host;
}

TEST(SharedPools, OnlyWritableSharedShmemMappingsArePools) {
  const Fixture host = workers();
  auto maps = read_all(host, {100, 200});
  std::vector<std::string> pools;
  for (const auto& [pid, entries] : maps) {
    for (const auto& e : entries) {
      if (is_shared_pool(e)) pools.push_back(e.path);
    }
  }
  EXPECT_EQ(pools, (std::vector<std::string>{"/memfd:kv-pool (deleted)", "/memfd:small (deleted)",
                                             "/memfd:kv-pool (deleted)", "/memfd:kv-pool (deleted)",
                                             "/dev/shm/psm_kv"}));
  const MapEntry& e = maps[200][2];
  EXPECT_EQ(e.dev_major, 0U);
  EXPECT_EQ(e.dev_minor, 0x1aU);
  EXPECT_EQ(e.inode, 31U);
  EXPECT_EQ(maps[100][0].dev_major, 0xfeU);
}

TEST(SharedPools, AMalformedDeviceIsAnErrorNamingTheLine) {
  Fixture host;
  host.write("proc/17/maps", "7f0000000000-7f0000400000 rw-s 00000000 0001 5 /memfd:x\n");
  auto maps = read_maps(host.paths(), 17);
  ASSERT_FALSE(maps);
  EXPECT_NE(maps.error().message.find("17/maps:1: malformed maps line"), std::string::npos)
      << maps.error().message;
}

TEST(SharedPools, OneOwnerPerPoolTheLowestPidsFirstMapping) {
  const Fixture host = workers();
  SharedPools pools;
  pools.update(read_all(host, {100, 200, 300}), kMiB);
  ASSERT_EQ(pools.all().size(), 2U) << "the memfd pool and the /dev/shm one; not the small memfd";
  const SharedPool& kv = pools.all().at({.dev_major = 0, .dev_minor = 1, .inode = 2048});
  EXPECT_EQ(kv.owner, (PoolMapping{.pid = 100, .range = {0x7f1000000000, 0x7f1000800000}}));
  ASSERT_EQ(kv.borrowed.size(), 2U);
  EXPECT_EQ(
      kv.borrowed[1],
      (PoolMapping{.pid = 200, .range = {0x7e6000000000, 0x7e6000400000}, .offset = 4 * kMiB}));
  // A pool only one target maps is a pool all the same: that target owns it.
  const SharedPool& shm = pools.all().at({.dev_major = 0, .dev_minor = 0x1a, .inode = 31});
  EXPECT_EQ(shm.owner.pid, 200);
  EXPECT_TRUE(shm.borrowed.empty());
  EXPECT_TRUE(pools.owns(100, {0x7f1000000000, 0x7f1000800000}));
  EXPECT_FALSE(pools.owns(200, {0x7e5000000000, 0x7e5000800000}));
  EXPECT_TRUE(pools.owns(200, {0x7e7000000000, 0x7e7000200000}));
  EXPECT_EQ(pools.borrowed(200), (std::vector<AddrRange>{{0x7e5000000000, 0x7e5000800000},
                                                         {0x7e6000000000, 0x7e6000400000}}));
  EXPECT_TRUE(pools.borrowed(100).empty());
  EXPECT_TRUE(pools.borrowed(300).empty());
}

TEST(SharedPools, TheOwnerStaysWhileItMapsThePoolAndTheNextTakesOverWhenItGoes) {
  Fixture host = workers();
  SharedPools pools;
  pools.update(read_all(host, {200}), kMiB);
  const PoolKey kv{.dev_major = 0, .dev_minor = 1, .inode = 2048};
  EXPECT_EQ(pools.all().at(kv).owner.pid, 200);
  // A lower pid that maps it later does not take it (its heat stays where it is).
  pools.update(read_all(host, {100, 200}), kMiB);
  EXPECT_EQ(pools.all().at(kv).owner.pid, 200);
  EXPECT_EQ(pools.all().at(kv).owner.range.start, 0x7e5000000000U);
  EXPECT_EQ(pools.borrowed(100), (std::vector<AddrRange>{{0x7f1000000000, 0x7f1000800000}}));
  // The owner is gone: the lowest pid left owns the pool.
  pools.update(read_all(host, {100}), kMiB);
  EXPECT_EQ(pools.all().at(kv).owner.pid, 100);
  EXPECT_TRUE(pools.borrowed(100).empty());
  // Nobody maps it: no pool.
  pools.update(read_all(host, {300}), kMiB);
  EXPECT_TRUE(pools.all().empty());
}

TEST(SharedPools, SamplesInABorrowedMappingBecomeTheOwnersAtTheSameFileOffset) {
  const Fixture host = workers();
  SharedPools pools;
  pools.update(read_all(host, {100, 200, 300}), kMiB);
  std::vector<AccessSample> samples{// 200's first mapping, 1 MiB + 8 KiB into the file.
                                    {.pid = 200, .addr = 0x7e5000102000, .time = 5},
                                    // 200's second mapping starts at file offset 4 MiB.
                                    {.pid = 200, .addr = 0x7e6000001000, .time = 6},
                                    // 200's own /dev/shm pool: it owns it, nothing to do.
                                    {.pid = 200, .addr = 0x7e7000000000, .time = 7},
                                    // 300's anonymous memory and the owner's own pool: as they are.
                                    {.pid = 300, .addr = 0x7f0000001000, .time = 8},
                                    {.pid = 100, .addr = 0x7f1000003000, .time = 9}};
  std::vector<RegionAccess> regions;
  pools.to_owners(samples, regions);
  EXPECT_EQ(samples[0].pid, 100);
  EXPECT_EQ(samples[0].addr, 0x7f1000102000U);
  EXPECT_EQ(samples[1].pid, 100);
  EXPECT_EQ(samples[1].addr, 0x7f1000401000U);
  EXPECT_EQ(samples[1].time, 6);
  EXPECT_EQ(samples[2].pid, 200);
  EXPECT_EQ(samples[2].addr, 0x7e7000000000U);
  EXPECT_EQ(samples[3].pid, 300);
  EXPECT_EQ(samples[4].addr, 0x7f1000003000U);
  EXPECT_TRUE(regions.empty());
}

TEST(SharedPools, ARegionOverABorrowedMappingAddsTheOwnersPartAndStays) {
  Fixture host;
  // 100 owns file bytes 0-8 MiB; 200 maps bytes 6-10 MiB of it, the last 2 MiB
  // past what the owner maps (grown by 200 alone).
  host.write("proc/100/maps",
             "7f1000000000-7f1000800000 rw-s 00000000 00:01 2048 /memfd:kv-pool (deleted)\n")
      .write("proc/200/maps",
             "7e4000000000-7e4000100000 rw-p 00000000 00:00 0 \n"
             "7e5000000000-7e5000400000 rw-s 00600000 00:01 2048 /memfd:kv-pool (deleted)\n");
  SharedPools pools;
  pools.update(read_all(host, {100, 200}), kMiB);
  // One DAMON region over 200's anonymous MiB and all of its pool mapping.
  std::vector<RegionAccess> regions{{.pid = 200,
                                     .range = {0x7e4000000000, 0x7e5000400000},
                                     .nr_accesses = 7,
                                     .max_nr_accesses = 20,
                                     .time = 3}};
  std::vector<AccessSample> samples{{.pid = 200, .addr = 0x7e5000300000}};
  pools.to_owners(samples, regions);
  ASSERT_EQ(regions.size(), 2U);
  EXPECT_EQ(regions[0].pid, 200) << "200's own part stays its own";
  EXPECT_EQ(regions[1].pid, 100);
  EXPECT_EQ(regions[1].range, (AddrRange{0x7f1000600000, 0x7f1000800000}));
  EXPECT_EQ(regions[1].nr_accesses, 7U);
  EXPECT_EQ(regions[1].max_nr_accesses, 20U);
  // File byte 9 MiB: the owner does not map it; the sample stays 200's (and
  // untracked there, it is dropped).
  EXPECT_EQ(samples[0].pid, 200);
  EXPECT_EQ(samples[0].addr, 0x7e5000300000U);
}

// A fake page table per process: the pages each has touched, and their node.
// 100 owns the 8 MiB pool but touched only its first page; 200 touched the
// first two pages of its whole-pool mapping.
TEST(SharedPools, PagesTheOwnerNeverTouchedAreFoundAndMovedThroughASharer) {
  const Fixture host = workers();
  auto pools = std::make_shared<SharedPools>();
  pools->update(read_all(host, {100, 200, 300}), kMiB);
  std::map<Pid, std::map<std::uint64_t, int>> present{
      {100, {{0x7f1000000000, 0}}}, {200, {{0x7e5000000000, 0}, {0x7e5000001000, 0}}}};
  std::vector<std::pair<Pid, int>> calls;
  MovePagesFn kernel = [&](Pid pid, std::span<void*> pages, const int* nodes, std::span<int> status,
                           int flags) -> MovePagesResult {
    calls.emplace_back(pid, flags);
    for (std::size_t i = 0; i < pages.size(); ++i) {
      auto it = present[pid].find(reinterpret_cast<std::uint64_t>(pages[i]));
      if (it == present[pid].end()) {
        status[i] = -ENOENT;
      } else {
        if (nodes != nullptr) it->second = nodes[i];
        status[i] = it->second;
      }
    }
    return {};
  };
  MovePagesFn through = through_sharers(kernel, pools);
  std::vector<void*> pages{
      reinterpret_cast<void*>(0x7f1000000000), reinterpret_cast<void*>(0x7f1000001000),
      reinterpret_cast<void*>(0x7f1000002000), reinterpret_cast<void*>(0x7f2000000000)};
  std::vector<int> status(pages.size());
  // The query: the owner's page, a page only 200 touched, a page nobody touched, and a page
  // of the small memfd (no pool): not present to 100, and looked for nowhere else.
  through(100, pages, nullptr, status, 0);
  EXPECT_EQ(status, (std::vector<int>{0, 0, -ENOENT, -ENOENT}));
  ASSERT_EQ(calls.size(), 2U) << "100, then 200 for the pool's pages 100 lacks";
  EXPECT_EQ(calls[1].first, 200);
  // The move: with the caller's flags, through 200 where 100 has no page.
  const std::vector<int> to_one(pages.size(), 1);
  through(100, pages, to_one.data(), status, 4);
  EXPECT_EQ(status, (std::vector<int>{1, 1, -ENOENT, -ENOENT}));
  EXPECT_EQ(present[100][0x7f1000000000], 1);
  EXPECT_EQ(present[200][0x7e5000001000], 1);
  EXPECT_EQ(calls.back(), (std::pair<Pid, int>{200, 4}));
  // A process that owns no pool: one call, as it is.
  calls.clear();
  through(300, pages, nullptr, status, 0);
  EXPECT_EQ(calls.size(), 1U);
}

}  // namespace
}  // namespace kvtier::agent
