#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "policy/config.hpp"

namespace kvtier::policy {
namespace {

using ::testing::HasSubstr;

// A minimal valid file; tests append or replace parts of it.
const std::string kGroup = R"(
[[group]]
name = "vllm"
[group.select]
comm = ["^vllm"]
)";

ConfigProblems problems_of(const std::string& text) {
  auto cfg = parse_config(text, "test.toml");
  if (cfg) {
    auto compiled = compile_config(std::move(*cfg));
    if (compiled) return {};
    return compiled.error();
  }
  return cfg.error();
}

// The single problem the text has; fails the test if it has none or several.
ConfigProblem only_problem(const std::string& text) {
  auto p = problems_of(text);
  EXPECT_EQ(p.size(), 1U) << [&] {
    std::string all;
    for (const auto& x : p) all += x.to_string() + "\n";
    return all;
  }();
  return p.empty() ? ConfigProblem{} : p.front();
}

TEST(Config, MinimalFileGetsEveryDefault) {
  auto cfg = parse_config(kGroup, "test.toml");
  ASSERT_TRUE(cfg);
  const Config def;
  EXPECT_EQ(cfg->daemon.interval, 5 * kNsPerSec);
  EXPECT_EQ(cfg->limits.migrate_rate, 256ULL << 20);
  EXPECT_DOUBLE_EQ(cfg->limits.cxl_fill_max, 0.9);
  EXPECT_EQ(cfg->mover.kind, MoverKind::kMovePages);
  EXPECT_EQ(cfg->telemetry.socket, def.telemetry.socket);
  EXPECT_FALSE(cfg->telemetry.prometheus);
  ASSERT_EQ(cfg->groups.size(), 1U);
  const auto& g = cfg->groups[0];
  EXPECT_EQ(g.name, "vllm");
  EXPECT_EQ(g.select.comm, (std::vector<std::string>{"^vllm"}));
  EXPECT_EQ(g.policy.cold_age, 10 * kNsPerSec);
  EXPECT_EQ(g.policy.cold_age_max, 600 * kNsPerSec);
  EXPECT_DOUBLE_EQ(g.policy.misdemotion_target, 0.05);
  EXPECT_DOUBLE_EQ(cfg->limits.dram_headroom, 0.03);
  EXPECT_EQ(cfg->tiering.numa_balancing, NumaBalancingMode::kTiering);
  EXPECT_EQ(cfg->tiering.promote_threshold, kPromoteAuto);
  EXPECT_EQ(cfg->daemon.promote_wake, 5 * kNsPerMs);
  EXPECT_FALSE(g.demotion_node.has_value());
  EXPECT_FALSE(g.policy.dram_limit.has_value());
}

TEST(Config, EveryKeyIsRead) {
  const std::string text = R"(
[daemon]
interval = "2s"
[logging]
level = "debug"
[telemetry]
socket = "/tmp/k.sock"
socket_mode = "0600"
socket_group = "wheel"
prometheus = true
prometheus_listen = "[::1]:9000"
prometheus_allow_non_loopback = true
[sources]
use = ["damon", "pmu"]
force = "damon"
sample_period = 97
max_samples_per_sec = 5000
damon_sample_interval = "10ms"
damon_aggr_interval = "200ms"
damon_min_regions = 20
damon_max_regions = 2000
idle_scan_interval = "30s"
[limits]
migrate_rate = "1GiB/s"
migrate_burst = "2GiB"
cxl_fill_max = "75%"
min_free = "1GiB"
[mover]
kind = "dry-run"
batch_pages = 256
[[group]]
name = "a"
priority = 5
demotion_node = 1
[group.select]
comm = ["x"]
cmdline = ["--model"]
exe = ["/usr/bin/python3"]
cgroup = ["/system.slice/vllm.service"]
pid = [42, 43]
[group.policy]
cold_age = "off"
half_life = "20s"
promote = true
promote_heat = 8
demote_heat = 0.25
min_residence = "2m"
dram_limit = "8GiB"
keep_free = "1GiB"
exclude = ["0x1000-0x3000"]
)";
  auto cfg = parse_config(text, "test.toml");
  ASSERT_TRUE(cfg) << cfg.error().front().to_string();
  EXPECT_EQ(cfg->daemon.interval, 2 * kNsPerSec);
  EXPECT_EQ(cfg->logging.level, LogLevel::kDebug);
  EXPECT_EQ(cfg->telemetry.socket_mode, 0600U);
  EXPECT_EQ(cfg->telemetry.socket_group, "wheel");
  EXPECT_TRUE(cfg->telemetry.prometheus);
  EXPECT_EQ(cfg->telemetry.prometheus_listen, "[::1]:9000");
  EXPECT_TRUE(cfg->telemetry.prometheus_allow_non_loopback);
  EXPECT_FALSE(Config{}.telemetry.prometheus_allow_non_loopback);
  EXPECT_EQ(cfg->sources.use, (std::vector{SourceKind::kDamon, SourceKind::kPmu}));
  EXPECT_EQ(cfg->sources.force, SourceKind::kDamon);
  EXPECT_EQ(cfg->sources.sample_period, 97U);
  EXPECT_EQ(cfg->sources.max_samples_per_sec, 5000U);
  EXPECT_EQ(cfg->sources.damon_sample_interval, 10 * kNsPerMs);
  EXPECT_EQ(cfg->sources.damon_aggr_interval, 200 * kNsPerMs);
  EXPECT_EQ(cfg->sources.damon_min_regions, 20U);
  EXPECT_EQ(cfg->sources.damon_max_regions, 2000U);
  EXPECT_EQ(cfg->sources.idle_scan_interval, 30 * kNsPerSec);
  EXPECT_EQ(cfg->limits.migrate_rate, 1ULL << 30);
  EXPECT_EQ(cfg->limits.migrate_burst, 2ULL << 30);
  EXPECT_DOUBLE_EQ(cfg->limits.cxl_fill_max, 0.75);
  EXPECT_EQ(cfg->limits.min_free, 1ULL << 30);
  EXPECT_EQ(cfg->mover.kind, MoverKind::kDryRun);
  EXPECT_EQ(cfg->mover.batch_pages, 256U);
  const auto& g = cfg->groups.at(0);
  EXPECT_EQ(g.priority, 5);
  EXPECT_EQ(g.demotion_node, 1);
  EXPECT_EQ(g.select.cmdline.size(), 1U);
  EXPECT_EQ(g.select.exe.size(), 1U);
  EXPECT_EQ(g.select.cgroup.size(), 1U);
  EXPECT_EQ(g.select.pid, (std::vector<Pid>{42, 43}));
  EXPECT_FALSE(g.policy.cold_age.has_value());
  EXPECT_EQ(g.policy.half_life, 20 * kNsPerSec);
  EXPECT_DOUBLE_EQ(g.policy.promote_heat, 8.0);
  EXPECT_DOUBLE_EQ(g.policy.demote_heat, 0.25);
  EXPECT_EQ(g.policy.min_residence, 120 * kNsPerSec);
  EXPECT_EQ(g.policy.dram_limit, 8ULL << 30);
  EXPECT_EQ(g.policy.keep_free, 1ULL << 30);
  EXPECT_EQ(g.policy.exclude, (std::vector{AddrRange{.start = 0x1000, .end = 0x3000}}));
  EXPECT_EQ(cfg->line_of("group[0].policy.dram_limit"), 48);
}

TEST(Config, EverySourceTheRegistryKnowsCanBeNamed) {
  auto cfg = parse_config(
      "[sources]\nuse = [\"pmu-soft\", \"idle\", \"faults\", \"damon\", \"pmu\"]\n"
      "force = \"pmu-soft\"\n" +
          kGroup,
      "test.toml");
  ASSERT_TRUE(cfg) << cfg.error().front().to_string();
  EXPECT_EQ(cfg->sources.use,
            (std::vector{SourceKind::kPmuSoft, SourceKind::kIdlePage, SourceKind::kFault,
                         SourceKind::kDamon, SourceKind::kPmu}));
  EXPECT_EQ(cfg->sources.force, SourceKind::kPmuSoft);
}

TEST(Config, SyntaxErrorHasItsLine) {
  auto p = only_problem("[limits]\nmin_free = \n");
  EXPECT_EQ(p.line, 2);
  EXPECT_THAT(p.message, HasSubstr("TOML syntax error"));
  EXPECT_THAT(p.to_string(), HasSubstr("test.toml:2: "));
}

TEST(Config, UnknownKeysAnywhere) {
  auto p = only_problem("[limits]\nmigrate_rte = \"1MiB/s\"\n" + kGroup);
  EXPECT_EQ(p.key, "limits.migrate_rte");
  EXPECT_EQ(p.line, 2);
  EXPECT_THAT(p.message, HasSubstr("unknown key (allowed: migrate_rate, migrate_burst"));
  EXPECT_EQ(only_problem("[limitz]\n" + kGroup).key, "limitz");
  EXPECT_EQ(only_problem(kGroup + "colour = 1\n").key, "group[0].select.colour");
  EXPECT_EQ(only_problem(kGroup + "[group.policy]\ncold = \"1s\"\n").key, "group[0].policy.cold");
}

TEST(Config, WrongTypes) {
  auto p = only_problem("[daemon]\ninterval = 5\n" + kGroup);
  EXPECT_EQ(p.key, "daemon.interval");
  EXPECT_THAT(p.message, HasSubstr("is an integer, expected a string"));
  EXPECT_THAT(p.message, HasSubstr("allowed: a duration"));
  EXPECT_EQ(only_problem("[telemetry]\nprometheus = \"yes\"\n" + kGroup).key,
            "telemetry.prometheus");
  EXPECT_EQ(only_problem("[mover]\nbatch_pages = 1.5\n" + kGroup).key, "mover.batch_pages");
  EXPECT_EQ(only_problem("limits = 3\n" + kGroup).key, "limits");
  EXPECT_EQ(only_problem("[[group]]\nname = \"x\"\n[group.select]\ncomm = \"^x\"\n").key,
            "group[0].select.comm");
  EXPECT_EQ(only_problem(kGroup + "pid = [\"1\"]\n").key, "group[0].select.pid[0]");
  EXPECT_EQ(only_problem("group = 1\n").key, "group");
}

TEST(Config, OutOfRangeValues) {
  auto p = only_problem("[limits]\ncxl_fill_max = \"0%\"\n" + kGroup);
  EXPECT_EQ(p.key, "limits.cxl_fill_max");
  EXPECT_THAT(p.message, HasSubstr("out of range"));
  EXPECT_EQ(only_problem("[limits]\nmigrate_burst = \"1MiB\"\n" + kGroup).key,
            "limits.migrate_burst");
  EXPECT_EQ(only_problem("[daemon]\ninterval = \"10ms\"\n" + kGroup).key, "daemon.interval");
  EXPECT_EQ(only_problem("[mover]\nbatch_pages = 0\n" + kGroup).key, "mover.batch_pages");
  EXPECT_EQ(only_problem("[telemetry]\nsocket_mode = \"0999\"\n" + kGroup).key,
            "telemetry.socket_mode");
  EXPECT_EQ(only_problem("[telemetry]\nprometheus_listen = \"localhost\"\n" + kGroup).key,
            "telemetry.prometheus_listen");
  EXPECT_EQ(only_problem("[telemetry]\nsocket = \"kvtier.sock\"\n" + kGroup).key,
            "telemetry.socket");
  EXPECT_EQ(only_problem("[logging]\nlevel = \"loud\"\n" + kGroup).key, "logging.level");
  EXPECT_EQ(only_problem("[mover]\nkind = \"memcpy\"\n" + kGroup).key, "mover.kind");
  // Issue 14: "damos" passed the check and kvtierd refused it at start.
  auto damos = only_problem("[mover]\nkind = \"damos\"\n" + kGroup);
  EXPECT_EQ(damos.key, "mover.kind");
  EXPECT_EQ(damos.message,
            "\"damos\" is not a mover kvtierd runs (DAMOS schemes are not driven by kvtierd); "
            "use \"move_pages\" (the default) or \"dry-run\"");
  EXPECT_EQ(only_problem("[sources]\nuse = [\"pebs\"]\n" + kGroup).key, "sources.use[0]");
  EXPECT_EQ(only_problem("[sources]\nforce = \"pebs\"\n" + kGroup).key, "sources.force");
  EXPECT_EQ(only_problem(kGroup + "pid = [0]\n").key, "group[0].select.pid[0]");
  EXPECT_EQ(only_problem(kGroup + "exe = [\"python\"]\n").key, "group[0].select.exe[0]");
  EXPECT_EQ(only_problem(kGroup + "cgroup = [\"x.slice\"]\n").key, "group[0].select.cgroup[0]");
  EXPECT_EQ(only_problem(kGroup + "[group.policy]\nhalf_life = \"0s\"\n").key,
            "group[0].policy.half_life");
  EXPECT_EQ(only_problem(kGroup + "[group.policy]\ndemote_heat = -1\n").key,
            "group[0].policy.demote_heat");
  EXPECT_EQ(only_problem(kGroup + "[group.policy]\nexclude = [\"0x3000-0x1000\"]\n").key,
            "group[0].policy.exclude[0]");
  EXPECT_EQ(only_problem(kGroup + "[group.policy]\nexclude = [\"4096-8192\"]\n").key,
            "group[0].policy.exclude[0]");
  EXPECT_EQ(only_problem(kGroup + "[group.policy]\ndram_limit = \"lots\"\n").key,
            "group[0].policy.dram_limit");
  p = only_problem("[[group]]\nname = \"x\"\npriority = 5000\n[group.select]\npid = [1]\n");
  EXPECT_EQ(p.key, "group[0].priority");
  EXPECT_THAT(p.message, HasSubstr("allowed: an integer from -1000 to 1000"));
}

TEST(Config, EmptySelectorsAndMissingGroups) {
  auto p = only_problem("[[group]]\nname = \"x\"\n");
  EXPECT_EQ(p.key, "group[0].select");
  EXPECT_THAT(p.message, HasSubstr("selects no process"));
  EXPECT_EQ(only_problem("[[group]]\nname = \"x\"\n[group.select]\ncomm = []\n").key,
            "group[0].select");
  EXPECT_EQ(only_problem("[[group]]\nname = \"x\"\n[group.select]\ncomm = [\"\"]\n").key,
            "group[0].select.comm[0]");
  p = only_problem("[daemon]\ninterval = \"1s\"\n");
  EXPECT_EQ(p.key, "group");
  EXPECT_THAT(p.message, HasSubstr("manage nothing"));
  EXPECT_EQ(only_problem("[[group]]\n[group.select]\npid = [1]\n").key, "group[0].name");
  EXPECT_EQ(only_problem(kGroup + kGroup).key, "group[1].name");  // duplicate name
}

TEST(Config, ContradictoryThresholds) {
  auto p = only_problem(kGroup + "[group.policy]\npromote_heat = 1\ndemote_heat = 1\n");
  EXPECT_EQ(p.key, "group[0].policy.promote_heat");
  EXPECT_THAT(p.message, HasSubstr("ping-pong"));
  // Without promotion the order does not matter.
  EXPECT_TRUE(
      problems_of(kGroup + "[group.policy]\npromote = false\npromote_heat = 1\ndemote_heat = 1\n")
          .empty());
  p = only_problem(kGroup + "[group.policy]\ncold_age = \"off\"\npromote = false\n");
  EXPECT_EQ(p.key, "group[0].policy");
  EXPECT_THAT(p.message, HasSubstr("never move anything"));
  p = only_problem("[daemon]\ninterval = \"10s\"\n" + kGroup +
                   "[group.policy]\ncold_age = \"5s\"\n");
  EXPECT_EQ(p.key, "group[0].policy.cold_age");
  EXPECT_EQ(p.line, 9);
  EXPECT_EQ(
      only_problem("[sources]\ndamon_min_regions = 50\ndamon_max_regions = 10\n" + kGroup).key,
      "sources.damon_min_regions");
  EXPECT_EQ(only_problem("[sources]\ndamon_sample_interval = \"1s\"\ndamon_aggr_interval = "
                         "\"500ms\"\n" +
                         kGroup)
                .key,
            "sources.damon_sample_interval");
  EXPECT_EQ(only_problem("[sources]\nuse = []\n" + kGroup).key, "sources.use");
  EXPECT_EQ(only_problem("[sources]\nuse = [\"pmu\", \"pmu\"]\n" + kGroup).key, "sources.use[1]");
}

// cold_age is the floor of the effective cold age, cold_age_max its ceiling: a
// long cold_age alone raises the ceiling with it, an explicit lower one is an error.
TEST(Config, ColdAgeMaxFollowsALongColdAgeUnlessSet) {
  auto cfg = parse_config(kGroup + "[group.policy]\ncold_age = \"1h\"\n", "test.toml");
  ASSERT_TRUE(cfg);
  EXPECT_EQ(cfg->groups[0].policy.cold_age_max, 3600 * kNsPerSec);
  cfg = parse_config(kGroup + "[group.policy]\ncold_age = \"30s\"\n", "test.toml");
  ASSERT_TRUE(cfg);
  EXPECT_EQ(cfg->groups[0].policy.cold_age_max, 600 * kNsPerSec);
  const auto p =
      only_problem(kGroup + "[group.policy]\ncold_age = \"1h\"\ncold_age_max = \"30m\"\n");
  EXPECT_EQ(p.key, "group[0].policy.cold_age_max");
  EXPECT_EQ(p.line, 8);
  EXPECT_THAT(p.message, HasSubstr("below cold_age"));
}

TEST(Config, NumaBalancingModes) {
  for (const auto& [text, mode] :
       {std::pair<std::string, NumaBalancingMode>{"tiering", NumaBalancingMode::kTiering},
        {"tiering-only", NumaBalancingMode::kTieringOnly},
        {"keep", NumaBalancingMode::kKeep}}) {
    auto cfg = parse_config("[tiering]\nnuma_balancing = \"" + text + "\"\n" + kGroup, "t.toml");
    ASSERT_TRUE(cfg) << text;
    EXPECT_EQ(cfg->tiering.numa_balancing, mode) << text;
  }
  EXPECT_EQ(only_problem("[tiering]\nnuma_balancing = \"normal\"\n" + kGroup).key,
            "tiering.numa_balancing");
}

TEST(Config, TieringScanSize) {
  auto dflt = parse_config(kGroup, "t.toml");
  ASSERT_TRUE(dflt);
  EXPECT_EQ(dflt->tiering.scan_size, 32ULL << 20);
  auto keep = parse_config("[tiering]\nscan_size = \"keep\"\n" + kGroup, "t.toml");
  ASSERT_TRUE(keep);
  EXPECT_FALSE(keep->tiering.scan_size.has_value());
  auto set = parse_config("[tiering]\nscan_size = \"64MiB\"\n" + kGroup, "t.toml");
  ASSERT_TRUE(set);
  EXPECT_EQ(set->tiering.scan_size, 64ULL << 20);
  auto odd = only_problem("[tiering]\nscan_size = \"1536KiB\"\n" + kGroup);
  EXPECT_EQ(odd.key, "tiering.scan_size");
  EXPECT_THAT(odd.message, HasSubstr("not a whole number of 1MiB"));
  EXPECT_THAT(only_problem("[tiering]\nscan_size = \"4GiB\"\n" + kGroup).message,
              HasSubstr("out of range"));
}

// The kernel's promotion rate limit (MB/s, in MiB): "keep" by default; the hint-fault budget.
TEST(Config, TieringPromoteRateLimit) {
  auto dflt = parse_config(kGroup, "t.toml");
  ASSERT_TRUE(dflt);
  EXPECT_FALSE(dflt->tiering.promote_rate_limit.has_value()) << "keep: the host's value";
  auto limited = parse_config("[tiering]\npromote_rate_limit = \"4MiB/s\"\n" + kGroup, "t.toml");
  ASSERT_TRUE(limited);
  EXPECT_EQ(limited->tiering.promote_rate_limit, 4ULL << 20);
  const auto slow = only_problem("[tiering]\npromote_rate_limit = \"512KiB/s\"\n" + kGroup);
  EXPECT_EQ(slow.key, "tiering.promote_rate_limit");
  EXPECT_THAT(slow.message, HasSubstr("out of range"));
  EXPECT_THAT(only_problem("[tiering]\npromote_rate_limit = \"1536KiB/s\"\n" + kGroup).message,
              HasSubstr("whole"));
  EXPECT_EQ(dflt->tiering.max_hint_faults_per_sec, 5000U);
  auto off = parse_config("[tiering]\nmax_hint_faults_per_sec = 0\n" + kGroup, "t.toml");
  ASSERT_TRUE(off);
  EXPECT_EQ(off->tiering.max_hint_faults_per_sec, 0U);
  EXPECT_EQ(only_problem("[tiering]\nmax_hint_faults_per_sec = -1\n" + kGroup).key,
            "tiering.max_hint_faults_per_sec");
}

// promote_threshold: "auto" by default (resolved when [tiering] is applied), the
// words for kvtier's promotion and the fault path's, a duration, or "keep".
TEST(Config, TieringPromoteThresholdWords) {
  const auto threshold = [](const std::string& v) {
    auto c = parse_config("[tiering]\npromote_threshold = \"" + v + "\"\n" + kGroup, "t.toml");
    return c ? c->tiering.promote_threshold : std::optional<TimeNs>{1};
  };
  EXPECT_EQ(threshold("auto"), kPromoteAuto);
  EXPECT_EQ(threshold("kvtier"), kPromoteByKvtier);
  EXPECT_EQ(threshold("first-access"), kPromoteOnFirstAccess);
  EXPECT_EQ(threshold("250ms"), 250 * kNsPerMs);
  EXPECT_EQ(threshold("keep"), std::nullopt);
  const auto zero = only_problem("[tiering]\npromote_threshold = \"0s\"\n" + kGroup);
  EXPECT_EQ(zero.key, "tiering.promote_threshold");
  EXPECT_THAT(zero.message, HasSubstr("out of range"));
  EXPECT_THAT(zero.message, HasSubstr("\"kvtier\""));
}

// promote_wake: how soon the promotion tick follows a touch of demoted memory.
TEST(Config, DaemonPromoteWake) {
  auto c = parse_config("[daemon]\npromote_wake = \"off\"\n" + kGroup, "t.toml");
  ASSERT_TRUE(c);
  EXPECT_FALSE(c->daemon.promote_wake.has_value());
  auto fast = parse_config("[daemon]\npromote_wake = \"5ms\"\n" + kGroup, "t.toml");
  ASSERT_TRUE(fast);
  EXPECT_EQ(fast->daemon.promote_wake, 5 * kNsPerMs);
  EXPECT_EQ(only_problem("[daemon]\npromote_wake = \"1min\"\n" + kGroup).key,
            "daemon.promote_wake");
}

// promote_yield: how long the promotion tick may wait at SCHED_IDLE; off by default.
TEST(Config, DaemonPromoteYield) {
  auto c = parse_config(kGroup, "t.toml");
  ASSERT_TRUE(c);
  EXPECT_FALSE(c->daemon.promote_yield.has_value());
  auto y = parse_config("[daemon]\npromote_yield = \"20ms\"\n" + kGroup, "t.toml");
  ASSERT_TRUE(y);
  EXPECT_EQ(y->daemon.promote_yield, 20 * kNsPerMs);
  EXPECT_EQ(only_problem("[daemon]\npromote_yield = \"1min\"\n" + kGroup).key,
            "daemon.promote_yield");
}

TEST(Config, AllProblemsAreReportedNotJustTheFirst) {
  auto p = problems_of(
      "[daemon]\ninterval = 1\n[limits]\nmin_free = \"-\"\nbogus = 1\n[[group]]\nname = \"\"\n");
  ASSERT_EQ(p.size(), 5U);
  EXPECT_EQ(p[0].key, "daemon.interval");
  EXPECT_EQ(p[1].key, "limits.min_free");
  EXPECT_EQ(p[2].key, "limits.bogus");
  EXPECT_EQ(p[3].key, "group[0].name");
  EXPECT_EQ(p[4].key, "group[0].select");
}

TEST(Config, BadRegexIsReportedByCompile) {
  auto p = only_problem(kGroup + "cmdline = [\"ok\", \"(unclosed\"]\n");
  EXPECT_EQ(p.key, "group[0].select.cmdline[1]");
  EXPECT_EQ(p.line, 6);
  EXPECT_THAT(p.message, HasSubstr("not a valid regular expression"));
}

Topology two_nodes() {
  Topology t;
  t.nodes.push_back(NumaNode{.id = 0, .cpus = {0}, .mem_total_bytes = 1ULL << 30});
  t.nodes.push_back(NumaNode{.id = 1, .mem_total_bytes = 1ULL << 30});
  t.nodes.push_back(NumaNode{.id = 2});
  return t;
}

TEST(Config, UnknownNodesNeedATopology) {
  const std::string text = kGroup + "[group.policy]\n" + "";
  auto cfg = parse_config(R"([[group]]
name = "a"
demotion_node = 7
[group.select]
pid = [1]
[[group]]
name = "b"
demotion_node = 2
[group.select]
pid = [2]
[[group]]
name = "c"
demotion_node = 1
[group.select]
pid = [3]
)",
                          "t.toml");
  ASSERT_TRUE(cfg);
  EXPECT_TRUE(compile_config(*cfg));  // without a topology nothing to check against
  const Topology topo = two_nodes();
  auto compiled = compile_config(*cfg, &topo);
  ASSERT_FALSE(compiled);
  ASSERT_EQ(compiled.error().size(), 2U);
  EXPECT_EQ(compiled.error()[0].key, "group[0].demotion_node");
  EXPECT_EQ(compiled.error()[0].line, 3);
  EXPECT_THAT(compiled.error()[0].message, HasSubstr("node 7 does not exist"));
  EXPECT_THAT(compiled.error()[0].message,
              HasSubstr("allowed: \"auto\" or a node with memory: 0, 1"));
  EXPECT_EQ(compiled.error()[1].key, "group[1].demotion_node");
  EXPECT_THAT(compiled.error()[1].message, HasSubstr("no memory"));
  EXPECT_EQ(
      only_problem("[[group]]\nname = \"x\"\ndemotion_node = \"near\"\n[group.select]\npid = [1]\n")
          .key,
      "group[0].demotion_node");
}

TEST(Config, MatchingFollowsPriorityThenFileOrder) {
  auto cfg = parse_config(R"([[group]]
name = "low"
[group.select]
comm = ["^python"]
[[group]]
name = "high"
priority = 10
[group.select]
cmdline = ["--model llama"]
cgroup = ["/infer.slice"]
[[group]]
name = "pid"
[group.select]
pid = [77]
exe = ["/opt/vllm/bin/vllm"]
)",
                          "t.toml");
  ASSERT_TRUE(cfg);
  auto c = compile_config(*cfg);
  ASSERT_TRUE(c);
  EXPECT_EQ(c->group_of({.pid = 1, .comm = "python3", .cmdline = "python3 -m x"}), 0U);
  EXPECT_EQ(c->group_of({.pid = 1, .comm = "python3", .cmdline = "python3 --model llama"}), 1U);
  EXPECT_EQ(c->group_of({.pid = 1, .comm = "x", .cgroup = "/infer.slice/a.scope"}), 1U);
  EXPECT_EQ(c->group_of({.pid = 1, .comm = "x", .cgroup = "/infer.slice"}), 1U);
  EXPECT_EQ(c->group_of({.pid = 1, .comm = "x", .cgroup = "/infer.slicer"}), std::nullopt);
  EXPECT_EQ(c->group_of({.pid = 77, .comm = "x"}), 2U);
  EXPECT_EQ(c->group_of({.pid = 78, .comm = "x", .exe = "/opt/vllm/bin/vllm"}), 2U);
  EXPECT_EQ(c->group_of({.pid = 78, .comm = "bash"}), std::nullopt);
}

TEST(Config, ShippedDefaultConfigPassesTheCheck) {
  const std::string path = std::string(KVTIER_SOURCE_DIR) + "/systemd/kvtier.toml";
  auto cfg = load_config(path);
  ASSERT_TRUE(cfg) << cfg.error().front().to_string();
  auto compiled = compile_config(std::move(*cfg));
  ASSERT_TRUE(compiled) << compiled.error().front().to_string();
  EXPECT_GE(compiled->config.groups.size(), 1U);
}

TEST(Config, MissingFileIsOneProblem) {
  auto cfg = load_config("/nonexistent/kvtier.toml");
  ASSERT_FALSE(cfg);
  ASSERT_EQ(cfg.error().size(), 1U);
  EXPECT_THAT(cfg.error()[0].to_string(), HasSubstr("/nonexistent/kvtier.toml:0: cannot read"));
}

}  // namespace
}  // namespace kvtier::policy

namespace kvtier::policy {
namespace {

TEST(Config, CheckReportsParseAndCompileProblemsTogetherByLine) {
  const Topology topo = two_nodes();
  auto c = compile_config_text(R"([[group]]
name = "a"
demotion_node = 9
[group.select]
comm = ["(x"]
[group.policy]
cold_age = "1x"
)",
                               "t.toml", &topo);
  ASSERT_FALSE(c);
  ASSERT_EQ(c.error().size(), 3U);
  EXPECT_EQ(c.error()[0].key, "group[0].demotion_node");
  EXPECT_EQ(c.error()[1].key, "group[0].select.comm[0]");
  EXPECT_EQ(c.error()[2].key, "group[0].policy.cold_age");
  EXPECT_TRUE(compile_config_text(kGroup, "t.toml", &topo));
  // A syntax error stops there: nothing else can be trusted.
  EXPECT_EQ(compile_config_text("[[group]\n", "t.toml").error().size(), 1U);
}

}  // namespace
}  // namespace kvtier::policy
