// The residency probe's parsers and summaries: /proc/vmstat selection, /proc/PID/stat with
// awkward comms, and the per-node counts and run-length map of move_pages statuses.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "bench/probe/proc_text.hpp"

namespace kvtier::bench {
namespace {

TEST(BenchProbe, VmstatKeepsOnlyTheWantedPrefixes) {
  const std::string text =
      "nr_free_pages 1234\npgmigrate_success 42\npgmigrate_fail 3\npgdemote_kswapd 7\n"
      "numa_hint_faults 9\nbroken_line\npgpromote_success notanumber\n";
  const std::vector<std::string> prefixes{"pgmigrate_", "pgdemote_", "pgpromote_"};
  const auto m = parse_vmstat(text, prefixes);
  EXPECT_EQ(m.size(), 3U);
  EXPECT_EQ(m.at("pgmigrate_success"), 42U);
  EXPECT_EQ(m.at("pgmigrate_fail"), 3U);
  EXPECT_EQ(m.at("pgdemote_kswapd"), 7U);
  EXPECT_FALSE(m.contains("pgpromote_success"));  // not a number: skipped, not zero
  EXPECT_EQ(parse_vmstat(text, {}).size(), 5U);
}

TEST(BenchProbe, ProcStatTimesAreCountedFromTheLastParenthesis) {
  // A comm with spaces and a ')' must not shift the fields.
  const std::string line =
      "123 (kv sim) x) S 1 123 123 0 -1 4194560 500 0 0 0 250 75 0 0 20 0 1 0 100 1000 10\n";
  const auto cpu = parse_proc_stat(line);
  ASSERT_TRUE(cpu) << cpu.error().message;
  EXPECT_EQ(cpu->comm, "kv sim) x");
  EXPECT_EQ(cpu->utime_ticks, 250U);
  EXPECT_EQ(cpu->stime_ticks, 75U);
  EXPECT_EQ(cpu->minflt, 500U);
  const auto kthread = parse_proc_stat("57 (kdamond.0) S 2 0 0 0 -1 2129984 0 0 0 0 3 1180 0 0");
  ASSERT_TRUE(kthread) << kthread.error().message;
  EXPECT_EQ(kthread->comm, "kdamond.0");
  EXPECT_EQ(kthread->stime_ticks, 1180U);
  EXPECT_FALSE(parse_proc_stat("no comm here"));
  EXPECT_FALSE(parse_proc_stat("1 (short) S 1 2 3"));
}

TEST(BenchProbe, NodeSummaryCountsAndRunLengthEncodes) {
  const std::vector<int> st{0, 0, 1, 1, 1, -2, 0, 1};
  const NodeSummary s = summarize_nodes(st, true);
  EXPECT_EQ(s.pages.at(0), 3U);
  EXPECT_EQ(s.pages.at(1), 4U);
  EXPECT_EQ(s.pages.at(-2), 1U);
  using Run = std::pair<int, std::uint64_t>;
  EXPECT_THAT(s.runs,
              ::testing::ElementsAre(Run{0, 2}, Run{1, 3}, Run{-2, 1}, Run{0, 1}, Run{1, 1}));
  EXPECT_TRUE(summarize_nodes(st, false).runs.empty());
  EXPECT_TRUE(summarize_nodes({}, true).pages.empty());
}

}  // namespace
}  // namespace kvtier::bench
