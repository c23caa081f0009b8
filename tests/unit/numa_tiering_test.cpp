// The kernel's tiering knobs (agent/host/numa_tiering.hpp) over a tree laid out
// like /proc/sys/kernel and debugfs' sched/numa_balancing.

#include "agent/host/numa_tiering.hpp"

#include <filesystem>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "fixture.hpp"

namespace kvtier {
namespace {

using agent::KernelTiering;
using agent::TieringWish;
using testing::dir;
using ::testing::ElementsAre;
using testing::file;
using testing::Fixture;
using ::testing::HasSubstr;

const std::string kBalancing = "proc/sys/kernel/numa_balancing";
const std::string kDebug = "sys/kernel/debug/sched/numa_balancing/";

Fixture host(const std::string& mode = "1") {
  Fixture t({dir("proc", {dir("sys", {dir("kernel", {file("numa_balancing", mode + "\n")})})}),
             dir("sys")});
  t.write(kDebug + "hot_threshold_ms", "1000\n");
  t.write(kDebug + "scan_period_min_ms", "1000\n");
  t.write(kDebug + "scan_period_max_ms", "60000\n");
  t.write(kDebug + "scan_size_mb", "256\n");
  return t;
}

// From a host with NUMA balancing off: "tiering" (normal + tiering) sets 3,
// "tiering-only" sets 2; each is put back to 0.
TEST(KernelTiering, BalancingBitsFromOff) {
  for (const auto& [bits, want] :
       {std::pair<std::uint64_t, const char*>{
            agent::kNumaBalancingNormal | agent::kNumaBalancingTiering, "3"},
        {agent::kNumaBalancingTiering, "2"}}) {
    Fixture t = host("0");
    KernelTiering k(t.paths());
    auto changed = k.apply(TieringWish{.balancing_bits = bits});
    ASSERT_TRUE(changed) << changed.error().message;
    EXPECT_EQ(t.read(kBalancing), want);
    EXPECT_TRUE(k.read().tiering());
    EXPECT_EQ(k.restore().size(), 1U);
    EXPECT_EQ(t.read(kBalancing), "0");
  }
}

TEST(KernelTiering, AddsTheTieringModeSetsTheKnobsAndPutsThemBack) {
  Fixture t = host("1");
  KernelTiering k(t.paths());
  EXPECT_FALSE(k.read().tiering());
  auto changed = k.apply(TieringWish{.balancing_bits = agent::kNumaBalancingTiering,
                                     .hot_threshold_ms = 3600000,
                                     .scan_period_min_ms = 100,
                                     .scan_period_max_ms = std::nullopt,
                                     .scan_size_mb = 32});
  ASSERT_TRUE(changed) << changed.error().message;
  EXPECT_EQ(changed->size(), 4U);
  EXPECT_THAT((*changed)[0], HasSubstr("numa_balancing: 1 -> 3")) << "normal mode kept";
  EXPECT_EQ(t.read(kBalancing), "3");
  EXPECT_EQ(t.read(kDebug + "hot_threshold_ms"), "3600000");
  EXPECT_EQ(t.read(kDebug + "scan_period_min_ms"), "100");
  EXPECT_EQ(t.read(kDebug + "scan_period_max_ms"), "60000") << "nullopt: left alone";
  EXPECT_EQ(t.read(kDebug + "scan_size_mb"), "32");
  EXPECT_EQ(k.read().scan_size_mb, 32U);
  EXPECT_TRUE(k.read().tiering());
  // A reload that changes a knob again still restores the host's own value.
  ASSERT_TRUE(k.apply(TieringWish{.hot_threshold_ms = 5000}));
  EXPECT_EQ(t.read(kDebug + "hot_threshold_ms"), "5000");
  const auto restored = k.restore();
  EXPECT_EQ(restored.size(), 4U);
  EXPECT_EQ(t.read(kDebug + "scan_size_mb"), "256");
  EXPECT_EQ(t.read(kBalancing), "1");
  EXPECT_EQ(t.read(kDebug + "hot_threshold_ms"), "1000");
  EXPECT_EQ(t.read(kDebug + "scan_period_min_ms"), "1000");
  EXPECT_TRUE(k.restore().empty()) << "idempotent";
}

// The promotion rate limit is a sysctl beside numa_balancing (6.0+): set when asked,
// journaled and put back like the debugfs knobs; a kernel without it reads as nullopt,
// and asking for it there is an error naming the file.
TEST(KernelTiering, ThePromotionRateLimitIsSetAndPutBack) {
  const std::string limit = "proc/sys/kernel/numa_balancing_promote_rate_limit_MBps";
  {
    Fixture t = host("0");
    KernelTiering k(t.paths());
    EXPECT_FALSE(k.read().promote_rate_limit_mbps.has_value()) << "an old kernel";
    auto refused = k.apply(TieringWish{.promote_rate_limit_mbps = 4});
    ASSERT_FALSE(refused);
    EXPECT_THAT(refused.error().message, HasSubstr("numa_balancing_promote_rate_limit_MBps"));
  }
  Fixture t = host("0");
  t.write(limit, "65536\n");
  KernelTiering k(t.paths());
  k.set_journal(t.path("run/tiering.saved"));
  std::filesystem::create_directories(t.path("run"));
  auto changed = k.apply(TieringWish{.promote_rate_limit_mbps = 4});
  ASSERT_TRUE(changed) << changed.error().message;
  ASSERT_EQ(changed->size(), 1U);
  EXPECT_THAT((*changed)[0], HasSubstr("numa_balancing_promote_rate_limit_MBps: 65536 -> 4"));
  EXPECT_EQ(t.read(limit), "4");
  EXPECT_EQ(k.read().promote_rate_limit_mbps, 4U);
  EXPECT_THAT(t.read("run/tiering.saved"),
              HasSubstr("numa_balancing_promote_rate_limit_MBps 65536"));
  // A kvtierd killed now: the next one takes the host's value from the journal.
  KernelTiering next(t.paths());
  next.set_journal(t.path("run/tiering.saved"));
  ASSERT_TRUE(next.apply(TieringWish{}));
  EXPECT_EQ(next.restore().size(), 1U);
  EXPECT_EQ(t.read(limit), "65536");
}

TEST(KernelTiering, NothingToChangeChangesNothing) {
  Fixture t = host("2");
  KernelTiering k(t.paths());
  auto changed = k.apply(
      TieringWish{.balancing_bits = agent::kNumaBalancingTiering, .hot_threshold_ms = 1000});
  ASSERT_TRUE(changed);
  EXPECT_TRUE(changed->empty());
  EXPECT_TRUE(k.restore().empty());
}

TEST(KernelTiering, AMissingKnobIsAnErrorThatNamesItsFile) {
  Fixture t = host("0");
  t.remove(kDebug + "scan_period_max_ms");
  KernelTiering k(t.paths());
  EXPECT_FALSE(k.read().scan_period_max_ms.has_value());
  auto changed = k.apply(
      TieringWish{.balancing_bits = agent::kNumaBalancingTiering, .scan_period_max_ms = 1000});
  ASSERT_FALSE(changed);
  EXPECT_THAT(changed.error().message, HasSubstr("scan_period_max_ms"));
  // What was set before the failure is still put back.
  EXPECT_EQ(t.read(kBalancing), "2");
  EXPECT_THAT(k.restore(), ElementsAre(HasSubstr("numa_balancing: restored 0")));
  EXPECT_EQ(t.read(kBalancing), "0");
}

// The journal: what kvtierd replaced is on disk until it is put back.
TEST(KernelTiering, TheJournalHoldsTheHostsValuesUntilTheyAreBack) {
  Fixture t = host("1");
  KernelTiering k(t.paths());
  k.set_journal(t.path("run/tiering.saved"));
  std::filesystem::create_directories(t.path("run"));
  ASSERT_TRUE(k.apply(
      TieringWish{.balancing_bits = agent::kNumaBalancingTiering, .scan_period_min_ms = 100}));
  EXPECT_EQ(t.read("run/tiering.saved"),
            "kvtier-tiering-journal 1\nnuma_balancing 1\nscan_period_min_ms 1000");
  EXPECT_EQ(k.restore().size(), 2U);
  EXPECT_FALSE(std::filesystem::exists(t.path("run/tiering.saved"))) << "all back: removed";
}

// A kvtierd killed before restore() (the watchdog's SIGABRT) leaves the knobs changed and the
// journal behind; the next one takes the host's values from it instead of the changed ones.
TEST(KernelTiering, TheNextDaemonRestoresWhatAKilledOneLeft) {
  Fixture t = host("0");
  std::filesystem::create_directories(t.path("run"));
  {
    KernelTiering killed(t.paths());
    killed.set_journal(t.path("run/tiering.saved"));
    ASSERT_TRUE(killed.apply(
        TieringWish{.balancing_bits = agent::kNumaBalancingNormal | agent::kNumaBalancingTiering,
                    .hot_threshold_ms = 3600000}));
  }  // no restore(): killed
  EXPECT_EQ(t.read(kBalancing), "3");
  KernelTiering next(t.paths());
  next.set_journal(t.path("run/tiering.saved"));
  auto lines = next.apply(
      TieringWish{.balancing_bits = agent::kNumaBalancingNormal | agent::kNumaBalancingTiering,
                  .hot_threshold_ms = 3600000});
  ASSERT_TRUE(lines) << lines.error().message;
  EXPECT_THAT(*lines, ElementsAre(HasSubstr("numa_balancing: a kvtierd that did not stop cleanly "
                                            "left it changed; the host's value 0"),
                                  HasSubstr("hot_threshold_ms: a kvtierd that did not stop "
                                            "cleanly left it changed; the host's value 1000")));
  next.restore();
  EXPECT_EQ(t.read(kBalancing), "0") << "the host's own value, not the killed daemon's 3";
  EXPECT_EQ(t.read(kDebug + "hot_threshold_ms"), "1000");
  EXPECT_FALSE(std::filesystem::exists(t.path("run/tiering.saved")));
}

TEST(KernelTiering, AJournalThatIsNotKvtiersIsIgnoredWithALine) {
  Fixture t = host("1");
  t.write("run/tiering.saved", "something else\nnuma_balancing 0\n");
  KernelTiering k(t.paths());
  k.set_journal(t.path("run/tiering.saved"));
  auto lines = k.apply(TieringWish{.balancing_bits = agent::kNumaBalancingTiering});
  ASSERT_TRUE(lines);
  EXPECT_THAT(*lines, ElementsAre(HasSubstr("not a kvtier tiering journal"),
                                  HasSubstr("numa_balancing: 1 -> 3")));
  k.restore();
  EXPECT_EQ(t.read(kBalancing), "1");

  // A line naming a file that is not one of the knobs is skipped, the others are taken.
  t.write("run/tiering.saved",
          "kvtier-tiering-journal 1\n../../etc/passwd 0\nscan_period_max_ms 60000\n");
  t.write(kDebug + "scan_period_max_ms", "1000\n");
  KernelTiering n(t.paths());
  n.set_journal(t.path("run/tiering.saved"));
  lines = n.apply(TieringWish{});
  ASSERT_TRUE(lines);
  EXPECT_THAT(*lines, ElementsAre(HasSubstr("line '../../etc/passwd 0' ignored"),
                                  HasSubstr("scan_period_max_ms: a kvtierd that did not stop")));
  n.restore();
  EXPECT_EQ(t.read(kDebug + "scan_period_max_ms"), "60000");
}

}  // namespace
}  // namespace kvtier
