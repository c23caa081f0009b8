#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "agent/sources/soft_dirty_source.hpp"
#include "fixture.hpp"

namespace kvtier {
namespace {

using testing::dir;
using testing::Fixture;

constexpr std::uint64_t kPresent = 1ULL << 63;
constexpr std::uint64_t kDirty = 1ULL << 55;
constexpr TimeNs kSec = 1'000'000'000;

TimeNs no_cost() {
  return 0;
}

void put_word(const std::filesystem::path& file, std::uint64_t index, std::uint64_t value) {
  const int fd = ::open(file.c_str(), O_WRONLY | O_CREAT, 0644);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(pwrite(fd, &value, sizeof(value), static_cast<off_t>(index * 8)), 8);
  ::close(fd);
}

std::string slurp(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// The kernel's side is played by the test: it sets the soft-dirty bit where a
// write would have, and clears every bit when "4" lands in clear_refs.
struct DirtyFixture {
  Fixture t{{dir("proc/4242")}};
  std::filesystem::path pagemap = t.path("proc/4242/pagemap");
  std::filesystem::path clear_refs = t.path("proc/4242/clear_refs");
  DirtyFixture() {
    t.write("proc/4242/maps",
            "00010000-00014000 rw-p 00000000 00:00 0 \n"
            "00020000-00021000 r-xp 00000000 08:01 7 /bin/x\n");
    t.write("proc/4242/clear_refs", "");
    for (std::uint64_t p = 0x10; p < 0x14; ++p) put_word(pagemap, p, kPresent);
    put_word(pagemap, 0x20, kPresent | kDirty);  // code: never scanned
  }
};

TEST(SoftDirty, FirstScanOnlyClearsThenReportsWrittenPresentPages) {
  DirtyFixture f;
  put_word(f.pagemap, 0x11, kPresent | kDirty);  // written before kvtier looked
  agent::SoftDirtySource s(f.t.paths(),
                           agent::SoftDirtyOptions{.scan_interval = 0, .cpu_clock = no_cost});
  ASSERT_TRUE(s.start());
  const Pid pid = 4242;
  ASSERT_TRUE(s.set_targets(std::span<const Pid>(&pid, 1)));
  agent::SourceBatch first;
  ASSERT_TRUE(s.collect(1 * kSec, first));
  EXPECT_TRUE(first.samples.empty()) << "the first scan is the baseline";
  EXPECT_EQ(slurp(f.clear_refs), "4");

  // The kernel cleared the bits; then page 0x12 was written, and page 0x13
  // written and swapped out (not present: not reported).
  put_word(f.pagemap, 0x11, kPresent);
  put_word(f.pagemap, 0x12, kPresent | kDirty);
  put_word(f.pagemap, 0x13, kDirty);
  f.t.write("proc/4242/clear_refs", "");
  agent::SourceBatch second;
  ASSERT_TRUE(s.collect(3 * kSec, second));
  ASSERT_EQ(second.samples.size(), 1U);
  const AccessSample& a = second.samples[0];
  EXPECT_EQ(a.pid, 4242);
  EXPECT_EQ(a.addr, 0x12000U);
  EXPECT_EQ(a.time, 3 * kSec);
  EXPECT_EQ(a.first_time, 1 * kSec) << "written at some time since the last clear";
  EXPECT_EQ(a.weight, 1U);
  EXPECT_EQ(a.source, SourceKind::kSoftDirty);
  EXPECT_EQ(slurp(f.clear_refs), "4") << "cleared again";
}

TEST(SoftDirty, ScansOnlyTheTrackedRangesWhenTheLoopGivesThem) {
  DirtyFixture f;
  agent::SoftDirtySource s(f.t.paths(),
                           agent::SoftDirtyOptions{.scan_interval = 0, .cpu_clock = no_cost});
  ASSERT_TRUE(s.start());
  const Pid pid = 4242;
  ASSERT_TRUE(s.set_targets(std::span<const Pid>(&pid, 1)));
  const std::vector<agent::TargetRanges> ranges{{.pid = pid, .ranges = {{0x12000, 0x14000}}}};
  ASSERT_TRUE(s.set_ranges(ranges));
  agent::SourceBatch b;
  ASSERT_TRUE(s.collect(1 * kSec, b));
  for (std::uint64_t p = 0x10; p < 0x14; ++p) put_word(f.pagemap, p, kPresent | kDirty);
  ASSERT_TRUE(s.collect(2 * kSec, b));
  ASSERT_EQ(b.samples.size(), 2U);
  EXPECT_EQ(b.samples[0].addr, 0x12000U);
  EXPECT_EQ(b.samples[1].addr, 0x13000U);
}

TEST(SoftDirty, ScansAreScanIntervalApartAndBudgeted) {
  DirtyFixture f;
  agent::SoftDirtySource s(
      f.t.paths(), agent::SoftDirtyOptions{
                       .max_pages_per_scan = 3, .scan_interval = 1 * kSec, .cpu_clock = no_cost});
  ASSERT_TRUE(s.start());
  const Pid pid = 4242;
  ASSERT_TRUE(s.set_targets(std::span<const Pid>(&pid, 1)));
  agent::SourceBatch b;
  ASSERT_TRUE(s.collect(10 * kSec, b));
  for (std::uint64_t p = 0x10; p < 0x14; ++p) put_word(f.pagemap, p, kPresent | kDirty);
  f.t.write("proc/4242/clear_refs", "");
  ASSERT_TRUE(s.collect(10 * kSec + kSec / 2, b));
  EXPECT_TRUE(b.samples.empty()) << "half a second after the last scan: no scan";
  EXPECT_EQ(slurp(f.clear_refs), "") << "and no clear";
  ASSERT_TRUE(s.collect(11 * kSec, b));
  EXPECT_EQ(b.samples.size(), 3U) << "at most max_pages_per_scan pages read";
}

// A scan that cost 100 ms of CPU puts the next one 5 s later at the default 2%.
TEST(SoftDirty, CostlyScansArePacedToTheirCpuShare) {
  DirtyFixture f;
  TimeNs cpu = 0;
  agent::SoftDirtySource s(
      f.t.paths(),
      agent::SoftDirtyOptions{.scan_interval = 1 * kSec, .cpu_clock = [&cpu] {
                                cpu += 50'000'000;  // 50 ms before, 50 ms after: 50 ms a scan
                                return cpu;
                              }});
  ASSERT_TRUE(s.start());
  const Pid pid = 4242;
  ASSERT_TRUE(s.set_targets(std::span<const Pid>(&pid, 1)));
  agent::SourceBatch b;
  ASSERT_TRUE(s.collect(10 * kSec, b));
  put_word(f.pagemap, 0x10, kPresent | kDirty);
  f.t.write("proc/4242/clear_refs", "");
  ASSERT_TRUE(s.collect(12 * kSec, b));
  EXPECT_TRUE(b.samples.empty()) << "50 ms at 2%: 2.5 s between scans";
  EXPECT_EQ(slurp(f.clear_refs), "");
  ASSERT_TRUE(s.collect(12 * kSec + kSec / 2, b));
  EXPECT_EQ(b.samples.size(), 1U);
}

TEST(SoftDirty, ExitedTargetIsSkippedAndAFixtureHasNoSoftDirty) {
  Fixture t({dir("proc")});
  agent::SoftDirtySource s(t.paths(), agent::SoftDirtyOptions{});
  ASSERT_TRUE(s.start());
  const Pid pid = 999999;
  ASSERT_TRUE(s.set_targets(std::span<const Pid>(&pid, 1)));
  agent::SourceBatch b;
  auto ok = s.collect(1, b);
  EXPECT_TRUE(ok) << ok.error().message;
  const auto a = s.probe();
  EXPECT_FALSE(a.ok);
  EXPECT_NE(a.why.find("self/clear_refs"), std::string::npos) << a.why;
}

// For real, on this kernel: the probe tries soft-dirty on a page of its own.
// Where the kernel keeps the bits, a write between two scans of this process
// is reported, at its page, and a page not written is not.
TEST(SoftDirty, RealKernelReportsTheWrittenPage) {
  agent::SoftDirtySource s(agent::HostPaths{},
                           agent::SoftDirtyOptions{.scan_interval = 0, .cpu_clock = no_cost});
  const auto a = s.probe();
  if (!a.ok) GTEST_SKIP() << "this kernel: " << a.why;
  constexpr std::size_t kPages = 8;
  void* mem =
      mmap(nullptr, kPages * kPageSize, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(mem, MAP_FAILED);
  auto* bytes = static_cast<volatile unsigned char*>(mem);
  for (std::size_t i = 0; i < kPages; ++i) bytes[i * kPageSize] = 1;
  const auto base = reinterpret_cast<std::uint64_t>(mem);
  const Pid self = getpid();
  ASSERT_TRUE(s.start());
  ASSERT_TRUE(s.set_targets(std::span<const Pid>(&self, 1)));
  const std::vector<agent::TargetRanges> ranges{
      {.pid = self, .ranges = {{base, base + kPages * kPageSize}}}};
  ASSERT_TRUE(s.set_ranges(ranges));
  agent::SourceBatch b;
  ASSERT_TRUE(s.collect(1, b));
  EXPECT_TRUE(b.samples.empty());
  bytes[5 * kPageSize] = 2;
  ASSERT_TRUE(s.collect(2, b));
  ASSERT_EQ(b.samples.size(), 1U);
  EXPECT_EQ(b.samples[0].addr, base + 5 * kPageSize);
  munmap(mem, kPages * kPageSize);
}

}  // namespace
}  // namespace kvtier
