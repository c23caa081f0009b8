#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>

#include "agent/sources/idle_page_source.hpp"
#include "fixture.hpp"

namespace kvtier {
namespace {

using testing::dir;
using testing::Fixture;

constexpr std::uint64_t kPresent = 1ULL << 63;

void put_word(const std::filesystem::path& file, std::uint64_t index, std::uint64_t value) {
  const int fd = ::open(file.c_str(), O_WRONLY | O_CREAT, 0644);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(pwrite(fd, &value, sizeof(value), static_cast<off_t>(index * 8)), 8);
  ::close(fd);
}
std::uint64_t get_word(const std::filesystem::path& file, std::uint64_t index) {
  std::uint64_t v = 0;
  const int fd = ::open(file.c_str(), O_RDONLY);
  EXPECT_EQ(pread(fd, &v, sizeof(v), static_cast<off_t>(index * 8)), 8);
  ::close(fd);
  return v;
}

// The kernel's side is played by the test: it clears an idle bit where the
// hardware would have set an accessed bit.
TEST(IdlePages, ReportsPagesWhoseIdleBitWasClearedSinceTheLastScan) {
  Fixture t({dir("proc"), dir("sys")});
  t.write("proc/4242/maps",
          "00010000-00014000 rw-p 00000000 00:00 0 \n"
          "00020000-00021000 r-xp 00000000 08:01 7 /bin/x\n");
  const auto pagemap = t.path("sys/../proc/4242/pagemap");
  put_word(pagemap, 0x10, kPresent | 100);
  put_word(pagemap, 0x11, kPresent | 101);
  put_word(pagemap, 0x12, 0);  // not present
  put_word(pagemap, 0x13, kPresent | 130);
  put_word(pagemap, 0x20, kPresent | 140);  // code: not scanned
  const auto bitmap = t.path("sys/kernel/mm/page_idle/bitmap");
  std::filesystem::create_directories(bitmap.parent_path());
  for (std::uint64_t w = 0; w < 4; ++w) put_word(bitmap, w, 0);

  agent::IdlePageSource s(t.paths(), agent::IdlePageOptions{.scan_interval = 0});
  ASSERT_TRUE(s.start());
  const Pid pid = 4242;
  ASSERT_TRUE(s.set_targets(std::span<const Pid>(&pid, 1)));
  agent::SourceBatch first;
  ASSERT_TRUE(s.collect(1, first));
  EXPECT_TRUE(first.samples.empty()) << "the first scan only marks pages idle";
  EXPECT_EQ(get_word(bitmap, 1), (1ULL << 36) | (1ULL << 37));  // pfns 100, 101
  EXPECT_EQ(get_word(bitmap, 2), 1ULL << 2);                    // pfn 130
  EXPECT_EQ(get_word(bitmap, 0), 0U);

  put_word(bitmap, 1, 1ULL << 36);  // pfn 101 accessed
  agent::SourceBatch second;
  ASSERT_TRUE(s.collect(2, second));
  ASSERT_EQ(second.samples.size(), 1U);
  EXPECT_EQ(second.samples[0].addr, 0x11000U);
  EXPECT_EQ(second.samples[0].pid, 4242);
  EXPECT_EQ(second.samples[0].time, 2U);
  EXPECT_EQ(second.samples[0].source, SourceKind::kIdlePage);
  EXPECT_EQ(get_word(bitmap, 1), (1ULL << 36) | (1ULL << 37)) << "marked idle again";

  // A page that moved to another frame is not judged by the old frame's bit.
  put_word(pagemap, 0x13, kPresent | 150);
  put_word(bitmap, 2, 0);
  agent::SourceBatch third;
  ASSERT_TRUE(s.collect(3, third));
  EXPECT_TRUE(third.samples.empty());
}

TEST(IdlePages, ScansAreScanIntervalApart) {
  Fixture t({dir("proc"), dir("sys")});
  t.write("proc/4242/maps", "00010000-00011000 rw-p 00000000 00:00 0 \n");
  const auto pagemap = t.path("proc/4242/pagemap");
  put_word(pagemap, 0x10, kPresent | 100);
  t.mkdir("sys/kernel/mm/page_idle");
  const auto bitmap = t.path("sys/kernel/mm/page_idle/bitmap");
  for (std::uint64_t w = 0; w < 2; ++w) put_word(bitmap, w, 0);
  constexpr TimeNs kSec = 1'000'000'000;
  agent::IdlePageSource s(t.paths(), agent::IdlePageOptions{.scan_interval = 10 * kSec});
  ASSERT_TRUE(s.start());
  const Pid pid = 4242;
  ASSERT_TRUE(s.set_targets(std::span<const Pid>(&pid, 1)));
  agent::SourceBatch b;
  ASSERT_TRUE(s.collect(100 * kSec, b));  // marks pfn 100 idle
  EXPECT_EQ(get_word(bitmap, 1), 1ULL << 36);
  put_word(bitmap, 1, 0);  // accessed
  ASSERT_TRUE(s.collect(109 * kSec, b));
  EXPECT_TRUE(b.samples.empty()) << "9 s after the last scan: no scan";
  EXPECT_EQ(get_word(bitmap, 1), 0U) << "and nothing marked";
  ASSERT_TRUE(s.collect(110 * kSec, b));
  ASSERT_EQ(b.samples.size(), 1U);
  EXPECT_EQ(b.samples[0].time, 110 * kSec);
}

TEST(IdlePages, ExitedTargetIsSkipped) {
  Fixture t({dir("proc"), dir("sys")});
  t.write("sys/kernel/mm/page_idle/bitmap", "");
  agent::IdlePageSource s(t.paths(), agent::IdlePageOptions{});
  ASSERT_TRUE(s.start());
  const Pid pid = 999999;
  ASSERT_TRUE(s.set_targets(std::span<const Pid>(&pid, 1)));
  agent::SourceBatch b;
  auto ok = s.collect(1, b);
  EXPECT_TRUE(ok) << ok.error().message;
  const auto a = s.probe();
  EXPECT_FALSE(a.ok);
  EXPECT_NE(a.why.find("self/pagemap"), std::string::npos) << a.why;
}

}  // namespace
}  // namespace kvtier
