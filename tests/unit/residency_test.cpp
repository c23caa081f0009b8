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

// Counts its calls; every 2 MiB block it is asked about is huge.
class CountingHugeProbe final : public HugePageProbe {
 public:
  Result<std::vector<std::uint64_t>> huge_blocks(Pid /*pid*/, AddrRange range) override {
    ++calls;
    std::vector<std::uint64_t> out;
    for (std::uint64_t b = range.start & ~(kHugePageSize - 1); b < range.end; b += kHugePageSize) {
      out.push_back(b);
    }
    return out;
  }
  int calls = 0;
};

// The pages sampled since the last read: many short runs, which share query calls.
TEST(ResidencyReader, ShortRangesShareQueryCallsAndNodesAsksNoHugePages) {
  testing::FakeKernel kernel;
  kernel.map(kBase, 64, 0);
  kernel.map(kBase + 64 * kPageSize, 64, 1);
  auto huge = std::make_shared<CountingHugeProbe>();
  ResidencyReader reader(kernel.fn(), 32, huge);
  // 1 + 2 + 3 pages on node 0, then 40 pages from node 0 into node 1, then one absent page.
  const auto pages = [](std::uint64_t first, std::uint64_t n) {
    return AddrRange{.start = kBase + first * kPageSize, .end = kBase + (first + n) * kPageSize};
  };
  const AddrRange r[] = {pages(0, 1), pages(2, 2), pages(5, 3), pages(44, 40), pages(200, 1)};
  std::string error;
  const PageMap m = reader.nodes(1, r, &error);
  EXPECT_TRUE(error.empty()) << error;
  EXPECT_EQ(kernel.calls, 2) << "47 pages in calls of 32";
  EXPECT_EQ(huge->calls, 0);
  EXPECT_TRUE(m.huge_blocks.empty());
  EXPECT_EQ(m.bytes_per_node.at(0), (1 + 2 + 3 + 20) * kPageSize);
  EXPECT_EQ(m.bytes_per_node.at(1), 20 * kPageSize);
  EXPECT_EQ(m.not_present_bytes, kPageSize);
  ASSERT_EQ(m.runs.size(), 6U);
  EXPECT_EQ(m.runs[1].range, pages(2, 2));
  EXPECT_EQ(m.runs[3].range, pages(44, 20));
  EXPECT_EQ(m.runs[3].node, 0);
  EXPECT_EQ(m.runs[4].range, pages(64, 20));
  EXPECT_EQ(m.runs[4].node, 1);
  EXPECT_EQ(m.runs[5].node, -1);

  // map() reads the same and asks for the huge pages of each range.
  const PageMap full = reader.map(1, r, &error);
  EXPECT_EQ(kernel.calls, 4);
  EXPECT_EQ(huge->calls, 5);
  EXPECT_EQ(full.huge_blocks, std::vector<std::uint64_t>{kBase});
  EXPECT_EQ(full.bytes_per_node, m.bytes_per_node);

  // The process exits after the first call: the first 32 pages, the error, no huge pages.
  kernel.calls = 0;
  kernel.gone_after_calls = 1;
  const PageMap part = reader.map(1, r, &error);
  EXPECT_NE(error.find("move_pages status query of pid 1"), std::string::npos) << error;
  EXPECT_EQ(part.bytes_per_node.at(0), 26 * kPageSize);
  EXPECT_EQ(part.bytes_per_node.at(1), 6 * kPageSize);
  EXPECT_TRUE(part.huge_blocks.empty());
  EXPECT_EQ(huge->calls, 5);
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
