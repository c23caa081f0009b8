#include <gtest/gtest.h>

#include "agent/host/damon_sysfs.hpp"

#include <filesystem>
#include "fixture.hpp"

namespace kvtier {
namespace {

using agent::DamonContextSpec;
using agent::DamonSysfs;
using agent::DamonTargetSpec;
using testing::dir;
using testing::Fixture;

const std::string kKd = "sys/kernel/mm/damon/admin/kdamonds/";
const std::string kCtx = kKd + "0/contexts/0/";

TEST(DamonSysfs, ConfiguresAVaddrContext) {
  Fixture t({dir("proc"), dir("sys")});
  t.copy("sources/damon-vaddr");
  DamonSysfs d = DamonSysfs::under(t.paths());
  const DamonContextSpec spec{
      .operations = "vaddr",
      .intervals = {.sample_us = 5000, .aggr_us = 100000, .update_us = 1000000},
      .nr_regions = {.min = 10, .max = 1000},
      .targets = {DamonTargetSpec{.pid = 4242}, DamonTargetSpec{.pid = 77}}};
  auto ok = d.configure(0, spec);
  ASSERT_TRUE(ok) << ok.error().message;
  EXPECT_EQ(t.read(kKd + "0/contexts/nr_contexts"), "1");
  EXPECT_EQ(t.read(kCtx + "operations"), "vaddr");
  EXPECT_EQ(t.read(kCtx + "monitoring_attrs/intervals/sample_us"), "5000");
  EXPECT_EQ(t.read(kCtx + "monitoring_attrs/intervals/aggr_us"), "100000");
  EXPECT_EQ(t.read(kCtx + "monitoring_attrs/intervals/update_us"), "1000000");
  EXPECT_EQ(t.read(kCtx + "monitoring_attrs/nr_regions/min"), "10");
  EXPECT_EQ(t.read(kCtx + "monitoring_attrs/nr_regions/max"), "1000");
  EXPECT_EQ(t.read(kCtx + "targets/nr_targets"), "2");
  EXPECT_EQ(t.read(kCtx + "targets/0/pid_target"), "4242");
  EXPECT_EQ(t.read(kCtx + "targets/1/pid_target"), "77");
  EXPECT_EQ(t.read(kCtx + "targets/0/regions/nr_regions"), "0");
}

TEST(DamonSysfs, PaddrTargetsGetRegionsAndNoPid) {
  Fixture t({dir("proc"), dir("sys")});
  t.copy("sources/damon-vaddr");
  t.mkdir(kCtx + "targets/0/regions/0");
  t.write(kCtx + "targets/0/regions/0/start", "0");
  t.write(kCtx + "targets/0/regions/0/end", "0");
  t.write(kCtx + "targets/0/pid_target", "untouched");
  DamonSysfs d = DamonSysfs::under(t.paths());
  const DamonContextSpec spec{
      .operations = "paddr",
      .targets = {DamonTargetSpec{.regions = {AddrRange{.start = 4096, .end = 1 << 30}}}}};
  ASSERT_TRUE(d.configure(0, spec));
  EXPECT_EQ(t.read(kCtx + "operations"), "paddr");
  EXPECT_EQ(t.read(kCtx + "targets/0/pid_target"), "untouched");
  EXPECT_EQ(t.read(kCtx + "targets/0/regions/nr_regions"), "1");
  EXPECT_EQ(t.read(kCtx + "targets/0/regions/0/start"), "4096");
  EXPECT_EQ(t.read(kCtx + "targets/0/regions/0/end"), std::to_string(1 << 30));
}

TEST(DamonSysfs, MissingDirectoryIsAnErrorNamingIt) {
  Fixture t({dir("proc"), dir("sys")});
  t.copy("sources/damon-vaddr");
  t.remove(kCtx + "targets/1");
  DamonSysfs d = DamonSysfs::under(t.paths());
  auto ok = d.configure(0, DamonContextSpec{.targets = {{.pid = 1}, {.pid = 2}}});
  ASSERT_FALSE(ok);
  EXPECT_NE(ok.error().message.find("targets/1/pid_target"), std::string::npos)
      << ok.error().message;
}

TEST(DamonSysfs, StateAndPid) {
  Fixture t({dir("proc"), dir("sys")});
  t.copy("sources/damon-vaddr");
  DamonSysfs d = DamonSysfs::under(t.paths());
  ASSERT_TRUE(d.turn_on(0));
  EXPECT_EQ(t.read(kKd + "0/state"), "on");
  EXPECT_FALSE(d.kdamond_pid(0)) << "pid -1 means no kdamond";
  t.write(kKd + "0/pid", "1234\n");
  auto pid = d.kdamond_pid(0);
  ASSERT_TRUE(pid);
  EXPECT_EQ(*pid, 1234);
  ASSERT_TRUE(d.send(0, "update_schemes_tried_regions"));
  EXPECT_EQ(t.read(kKd + "0/state"), "update_schemes_tried_regions");
  auto ops = d.avail_operations(0);
  ASSERT_TRUE(ops);
  EXPECT_EQ(*ops, (std::vector<std::string>{"vaddr", "fvaddr", "paddr"}));
}

TEST(DamonSysfs, ClaimsAnIdleKdamondOrAddsOne) {
  Fixture t({dir("proc"), dir("sys")});
  t.copy("sources/damon-vaddr");
  DamonSysfs d = DamonSysfs::under(t.paths());
  auto kd = d.claim_kdamond();
  ASSERT_TRUE(kd);
  EXPECT_EQ(*kd, 0);
  t.write(kKd + "0/state", "on\n");
  auto busy = d.claim_kdamond();
  ASSERT_FALSE(busy);
  EXPECT_EQ(busy.error().code, EBUSY);
  EXPECT_NE(busy.error().message.find("all 1 kdamonds are on"), std::string::npos);
  t.write(kKd + "nr_kdamonds", "0\n");
  auto added = d.claim_kdamond();
  ASSERT_TRUE(added);
  EXPECT_EQ(*added, 0);
  EXPECT_EQ(t.read(kKd + "nr_kdamonds"), "1");
}

// A kvtierd killed before it turned its kdamond off: the next one turns off the kdamond its
// owner file names when it still runs with that pid, and leaves any other one alone.
TEST(DamonSysfs, ReclaimsOnlyItsOwnLeftoverKdamond) {
  Fixture t({dir("proc"), dir("sys"), dir("run")});
  t.copy("sources/damon-vaddr");
  DamonSysfs d = DamonSysfs::under(t.paths());
  const auto owner = t.path("run/damon.kdamond");
  EXPECT_FALSE(d.reclaim_leftover(owner)) << "no file: nothing to do";

  t.write(kKd + "0/state", "on\n");
  t.write(kKd + "0/pid", "4321\n");
  ASSERT_TRUE(d.write_owner(owner, 0, 4321));
  EXPECT_EQ(t.read("run/damon.kdamond"), "kdamond 0 pid 4321");
  auto line = d.reclaim_leftover(owner);
  ASSERT_TRUE(line);
  EXPECT_NE(line->find("kdamond 0 (pid 4321) left on by a kvtierd that did not stop cleanly: "
                       "turned off"),
            std::string::npos)
      << *line;
  EXPECT_EQ(t.read(kKd + "0/state"), "off");
  EXPECT_FALSE(std::filesystem::exists(owner));
  auto kd = d.claim_kdamond();
  ASSERT_TRUE(kd) << "claimable again";

  // Another pid on that kdamond now: another DAMON user's, left on.
  t.write(kKd + "0/state", "on\n");
  t.write(kKd + "0/pid", "999\n");
  ASSERT_TRUE(d.write_owner(owner, 0, 4321));
  line = d.reclaim_leftover(owner);
  ASSERT_TRUE(line);
  EXPECT_NE(line->find("is gone"), std::string::npos) << *line;
  EXPECT_EQ(t.read(kKd + "0/state"), "on");

  t.write("run/damon.kdamond", "garbage\n");
  line = d.reclaim_leftover(owner);
  ASSERT_TRUE(line);
  EXPECT_NE(line->find("not 'kdamond N pid P'"), std::string::npos) << *line;
  EXPECT_EQ(t.read(kKd + "0/state"), "on");
}

}  // namespace
}  // namespace kvtier
