#include "agent/host/residency.hpp"

#include <gtest/gtest.h>

#include "unit/fake_kernel.hpp"

namespace kvtier::agent {
namespace {

constexpr std::uint64_t kBase = 0x7f0000000000ULL;

TEST(ResidencyReader, BytesPerNodePerRange) {
  testing::FakeKernel kernel;
  kernel.map(kBase, 100, 0);
  kernel.map(kBase + 100 * kPageSize, 50, 1);
  ResidencyReader reader(kernel.fn(), 32);
  const AddrRange r[] = {{.start = kBase, .end = kBase + 120 * kPageSize},
                         {.start = kBase + 120 * kPageSize, .end = kBase + 200 * kPageSize}};
  auto res = reader.read(1, r);
  ASSERT_TRUE(res) << res.error().message;
  ASSERT_EQ(res->size(), 2U);
  EXPECT_EQ((*res)[0].bytes_on(0), 100 * kPageSize);
  EXPECT_EQ((*res)[0].bytes_on(1), 20 * kPageSize);
  EXPECT_EQ((*res)[1].bytes_on(1), 30 * kPageSize);
  EXPECT_EQ((*res)[1].not_present_bytes, 50 * kPageSize);
  EXPECT_EQ(kernel.move_calls, 0);
  EXPECT_EQ(kernel.calls, 4 + 3);  // 120 pages in batches of 32, then 80
}

TEST(ResidencyReader, GoneProcessIsAnError) {
  testing::FakeKernel kernel;
  kernel.gone_after_calls = 0;
  ResidencyReader reader(kernel.fn());
  const AddrRange r[] = {{.start = kBase, .end = kBase + kPageSize}};
  auto res = reader.read(77, r);
  ASSERT_FALSE(res);
  EXPECT_EQ(res.error().code, ESRCH);
  EXPECT_NE(res.error().message.find("77"), std::string::npos);
}

constexpr std::string_view kNumaMaps =
    "55d4c2a00000 default file=/usr/bin/cat mapped=2 N0=2 kernelpagesize_kB=4\n"
    "7f0000000000 default anon=30000 dirty=30000 active=0 N0=20000 N1=10000 "
    "kernelpagesize_kB=4\n"
    "7f8000000000 bind:1 anon=1024 dirty=1024 N1=1024 kernelpagesize_kB=4\n"
    "7fa000000000 default file=/dev/hugepages/kv huge dirty=4 N0=3 N1=1 kernelpagesize_kB=2048\n"
    "7ffd1c000000 default stack anon=3 dirty=3 N0=3 kernelpagesize_kB=4\n";

TEST(NumaMaps, ParsesNodesPageSizesAndKinds) {
  auto entries = parse_numa_maps(kNumaMaps, "numa_maps");
  ASSERT_TRUE(entries) << entries.error().message;
  ASSERT_EQ(entries->size(), 5U);
  const auto& kv = (*entries)[1];
  EXPECT_EQ(kv.start, 0x7f0000000000ULL);
  EXPECT_TRUE(kv.anon);
  EXPECT_EQ(kv.bytes_on(0), 20000 * kPageSize);
  EXPECT_EQ(kv.bytes_on(1), 10000 * kPageSize);
  EXPECT_EQ((*entries)[2].policy, "bind:1");
  const auto& huge = (*entries)[3];
  EXPECT_TRUE(huge.huge);
  EXPECT_EQ(huge.page_size, kHugePageSize);
  EXPECT_EQ(huge.bytes_on(1), kHugePageSize);
  EXPECT_EQ((*entries)[0].file, "/usr/bin/cat");

  const auto all = numa_maps_bytes(*entries);
  EXPECT_EQ(all.at(1), (10000 + 1024) * kPageSize + kHugePageSize);
  const AddrRange only[] = {{.start = 0x7f0000000000ULL, .end = 0x7f0000001000ULL}};
  const auto kv_only = numa_maps_bytes(*entries, only);
  EXPECT_EQ(kv_only.at(0), 20000 * kPageSize);
  EXPECT_EQ(kv_only.at(1), 10000 * kPageSize);
}

TEST(NumaMaps, MalformedLinesNameTheLine) {
  for (const char* bad : {"zz default N0=1\n", "7f00 default N0=x\n", "7f00\n",
                          "7f00 default kernelpagesize_kB=big\n"}) {
    auto e = parse_numa_maps(bad, "/proc/9/numa_maps");
    ASSERT_FALSE(e) << bad;
    EXPECT_NE(e.error().message.find("/proc/9/numa_maps:1"), std::string::npos)
        << e.error().message;
  }
  auto empty = parse_numa_maps("", "x");
  ASSERT_TRUE(empty);
  EXPECT_TRUE(empty->empty());
}

}  // namespace
}  // namespace kvtier::agent
