// /proc/PID files are written by whoever owns the process: the readers bound
// what they take (issue 13: a 40 KB argument crashed kvtierd's matcher).

#include <gtest/gtest.h>

#include <string>

#include "agent/host/procfs.hpp"
#include "agent/host/sysfs.hpp"
#include "agent/host/topology_reader.hpp"
#include "fixture.hpp"
#include "policy/config.hpp"

namespace kvtier::agent {
namespace {

TEST(ProcfsBounds, CommandLineIsReadUpToTheBound) {
  testing::Fixture host({testing::dir(
      "proc",
      {testing::dir("77",
                    {testing::file("comm", "python3\n"),
                     testing::file("cmdline", std::string("/python3\0", 9) +
                                                  std::string(2 * policy::kMaxCmdlineBytes, 'x') +
                                                  std::string(1, '\0'))})})});
  auto info = read_process(host.paths(), 77);
  ASSERT_TRUE(info) << info.error().message;
  EXPECT_EQ(info->cmdline.size(), policy::kMaxCmdlineBytes);
  EXPECT_TRUE(info->cmdline.starts_with("/python3 xxx"));
}

TEST(ProcfsBounds, PureParsersTakeAnyText) {
  EXPECT_EQ(parse_cmdline(std::string("a\0b\0\0", 5)), "a b");
  EXPECT_EQ(parse_cmdline(std::string("\0\0", 2)), "");
  EXPECT_EQ(parse_cgroup("1:cpu:/x\n0::/system.slice/a.service\n"), "/system.slice/a.service");
  EXPECT_FALSE(parse_cgroup("1:cpu:/x"));
  auto maps = parse_maps("00400000-00452000 r-xp 00000000 08:02 173521 /usr/bin/x\n", "m");
  ASSERT_TRUE(maps);
  EXPECT_EQ((*maps)[0].path, "/usr/bin/x");
  auto bad = parse_maps("ffff-0000 rw-p 0 0:0 0\n", "m");
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().message, "m:1: malformed maps line 'ffff-0000 rw-p 0 0:0 0'");
}

TEST(ProcfsBounds, ThreadsComeFromTheStatusLine) {
  EXPECT_EQ(parse_status_threads("Name:\tkvsim\nUmask:\t0022\nThreads:\t1\nSigQ:\t0/1\n"), 1U);
  EXPECT_EQ(parse_status_threads("Threads:\t48"), 48U);
  EXPECT_FALSE(parse_status_threads("Name:\tkvsim\n"));
  EXPECT_FALSE(parse_status_threads("Threads:\t0\n")) << "a live process has a thread";
  EXPECT_FALSE(parse_status_threads("Threads:\tmany\n"));
}

// A process's CPU time (utime + stime, all threads) from /proc/PID/stat; the
// command name may hold blanks and parentheses, so fields count from the last ')'.
TEST(ProcfsBounds, CpuTicksComeFromTheStatLine) {
  EXPECT_EQ(parse_stat_cpu_ticks("188 (kv sim) R 1 188 188 0 -1 4194560 4245 0 0 0 116 23 0 0 20 0 "
                                 "1 0 5000 300000000 65000\n"),
            139U);
  EXPECT_EQ(parse_stat_cpu_ticks("9 (a) b)) S 1 9 9 0 -1 0 0 0 0 0 7 5 0 0 20 0 1 0 1"), 12U);
  EXPECT_FALSE(parse_stat_cpu_ticks("188 (kvsim) R 1 188 188 0 -1 4194560 4245 0 0 0"))
      << "cut short before utime";
  EXPECT_FALSE(parse_stat_cpu_ticks("188 (kvsim) R 1 188 188 0 -1 0 0 0 0 0 x 3 0"));
  EXPECT_FALSE(parse_stat_cpu_ticks("no parenthesis at all"));
}

// Lists are expanded id by id: a huge range is refused, not allocated.
TEST(ProcfsBounds, IdListsAndNumbersAreBounded) {
  auto ids = parse_id_list("0-2000000000", "online");
  ASSERT_FALSE(ids);
  EXPECT_EQ(
      ids.error().message,
      "online: malformed id list '0-2000000000' (bad part '0-2000000000'); expected e.g. 0-3,8");
  EXPECT_EQ(parse_id_list("0-3,65536", "x").value().size(), 5U);
  EXPECT_FALSE(parse_meminfo_field("Node 0 MemTotal: 99999999999999999 kB\n", "MemTotal", "m"));
  EXPECT_EQ(parse_meminfo_field("Node 0 MemTotal: 4 kB\n", "MemTotal", "m").value(), 4096U);
  EXPECT_FALSE(parse_distances("10 -1", "d"));
  EXPECT_EQ(parse_u64("250\n", "read_latency").value(), 250U);
  EXPECT_FALSE(parse_u64("", "read_latency"));
}

}  // namespace
}  // namespace kvtier::agent
