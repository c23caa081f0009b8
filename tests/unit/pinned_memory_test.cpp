// What the kernel shows of long-term pinned memory (agent/host/pinned_memory.hpp),
// over a /proc tree taken from a 6.18 host whose process registered two
// io_uring buffers (tests/fixtures/pinned/host-6.18).
#include "agent/host/pinned_memory.hpp"

#include <gtest/gtest.h>

#include <cerrno>
#include <filesystem>
#include <map>
#include <vector>

#include "fixture.hpp"

namespace kvtier::agent {
namespace {

using testing::dir;
using testing::file;

const HostPaths kHost =
    HostPaths::under(std::filesystem::path(KVTIER_FIXTURES) / "pinned" / "host-6.18");

TEST(PinnedMemory, VmPinInBytes) {
  EXPECT_EQ(parse_status_vm_pin("Name:\tx\nVmPin:\t    1540 kB\nThreads:\t1\n"), 1540U * 1024);
  EXPECT_EQ(parse_status_vm_pin("VmPin:\t       0 kB\n"), 0U);
  EXPECT_FALSE(parse_status_vm_pin("Name:\tx\nThreads:\t1\n"));  // no such line
  EXPECT_FALSE(parse_status_vm_pin("VmPin:\t12 pages\n"));
}

TEST(PinnedMemory, IoUringBuffersPageAlignedOutwards) {
  const auto r = parse_io_uring_buffers(
      "UserFiles:\t0\nUserBufs:\t2\n    0: 0x7f2d8ee00000/1048576\n"
      "    1: 0x7f2d8f000064/524288\nPollList:\n",
      "fdinfo/3");
  ASSERT_TRUE(r) << r.error().message;
  ASSERT_EQ(r->size(), 2U);
  EXPECT_EQ((*r)[0], (AddrRange{0x7f2d8ee00000, 0x7f2d8ef00000}));
  // 0x64 into a page, 512 KiB long: 129 pages.
  EXPECT_EQ((*r)[1], (AddrRange{0x7f2d8f000000, 0x7f2d8f081000}));
}

TEST(PinnedMemory, NoBuffersAndMalformedLines) {
  auto none = parse_io_uring_buffers("UserFiles:\t0\nUserBufs:\t0\nPollList:\n", "f");
  ASSERT_TRUE(none);
  EXPECT_TRUE(none->empty());
  auto bad = parse_io_uring_buffers("UserBufs:\t1\n    0: 7f2d8ee00000-1048576\n", "fdinfo/3");
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().message, "fdinfo/3: malformed UserBufs line '    0: 7f2d8ee00000-1048576'");
}

TEST(PinnedMemory, ReadsAProcessFromARealTree) {
  auto pm = read_pinned_memory(kHost, 4242);
  ASSERT_TRUE(pm) << pm.error().message;
  EXPECT_EQ(pm->vm_pin_bytes, 1540U * 1024);
  EXPECT_EQ(pm->io_urings, 1U);
  std::uint64_t bytes = 0;
  for (const auto& r : pm->registered) bytes += r.bytes();
  // VmPin counts the pages the buffers span: the two agree.
  EXPECT_EQ(bytes, *pm->vm_pin_bytes);
}

TEST(PinnedMemory, GoneProcessAndNoFdDirectory) {
  auto gone = read_pinned_memory(kHost, 999999);
  ASSERT_FALSE(gone);
  EXPECT_EQ(gone.error().code, ESRCH);
  testing::Fixture host({dir("proc", {dir("7", {file("status", "Name:\tx\n")})})});
  auto pm = read_pinned_memory(host.paths(), 7);
  ASSERT_TRUE(pm) << pm.error().message;
  EXPECT_FALSE(pm->vm_pin_bytes);
  EXPECT_TRUE(pm->registered.empty());
}

TEST(PinnedMemory, MovableZonesFromZoneinfo) {
  // Node 0's Movable zone manages nothing; node 1's Normal zone is not movable.
  const auto movable = parse_movable_zones(
      "Node 0, zone   Normal\n  pages free     10\n        managed  5000\n"
      "Node 0, zone  Movable\n  pages free     0\n        managed  0\n"
      "Node 1, zone   Normal\n  pages free     7\n        managed  300\n"
      "Node 1, zone  Movable\n  pages free     1000\n        boost    0\n"
      "        managed  131072\n        protection: (0, 0, 0, 0, 0)\n");
  EXPECT_EQ(movable, (std::map<int, std::uint64_t>{{1, 131072ULL * 4096}}));
  EXPECT_TRUE(parse_movable_zones("").empty());
  // The checked-in zoneinfo has Movable zones that manage no page.
  EXPECT_TRUE(
      read_movable_zones(HostPaths::under(std::filesystem::path(KVTIER_FIXTURES) / "procfs"))
          .empty());
}

}  // namespace
}  // namespace kvtier::agent
