#include <gtest/gtest.h>

#include "agent/sources/source_registry.hpp"
#include "fixture.hpp"
#include "policy/config.hpp"

namespace kvtier {
namespace {

using agent::Availability;
using agent::SourceFactory;
using agent::SourceRegistry;

// Logic-only stand-in: the registry's choice depends on probe() alone.
class FixedSource final : public agent::HotnessSource {
 public:
  FixedSource(SourceKind kind, Availability a) : kind_(kind), a_(std::move(a)) {}
  [[nodiscard]] SourceKind kind() const override { return kind_; }
  [[nodiscard]] Availability probe() const override { return a_; }
  Result<void> start() override { return {}; }
  Result<void> set_targets(std::span<const Pid> /*pids*/) override { return {}; }
  Result<void> collect(TimeNs /*now*/, agent::SourceBatch& /*out*/) override { return {}; }
  void stop() override {}

 private:
  SourceKind kind_;
  Availability a_;
};

SourceRegistry registry() {
  SourceRegistry r;
  auto add = [&r](SourceKind kind, bool ok, std::string why) {
    r.add(SourceFactory{.kind = kind, .summary = "test", .make = [kind, ok, why] {
                          return std::make_unique<FixedSource>(kind, Availability{ok, why});
                        }});
  };
  add(SourceKind::kPmu, false, "no PMU event: none");
  add(SourceKind::kDamon, false, "no DAMON vaddr: paddr only");
  add(SourceKind::kFault, true, "ok: faults");
  add(SourceKind::kPmuSoft, true, "ok: page-faults");
  add(SourceKind::kSoftDirty, false, "no soft-dirty tracking");
  return r;
}

TEST(SourceRegistry, RunsEveryAvailableOneAndSaysWhyNotTheOthers) {
  const auto reg = registry();
  auto c = agent::select_sources(reg, {}, std::nullopt);
  ASSERT_TRUE(c) << c.error().message;
  ASSERT_EQ(c->sources.size(), 1U);
  EXPECT_EQ(c->sources[0].source->kind(), SourceKind::kFault);
  EXPECT_EQ(c->sources[0].reason, "ok: faults");
  EXPECT_EQ(
      c->summary,
      "faults; not pmu: no PMU event: none; not damon: no DAMON vaddr: paddr only; not dirty: "
      "no soft-dirty tracking");
  EXPECT_EQ(c->reports.size(), 4U);
}

TEST(SourceRegistry, TheConfigsListInItsOrder) {
  const auto reg = registry();
  const std::vector<SourceKind> use = {SourceKind::kPmuSoft, SourceKind::kDamon,
                                       SourceKind::kFault};
  auto c = agent::select_sources(reg, use, std::nullopt);
  ASSERT_TRUE(c);
  ASSERT_EQ(c->sources.size(), 2U);
  EXPECT_EQ(c->sources[0].source->name(), "pmu-soft");
  EXPECT_EQ(c->sources[1].source->name(), "faults");
  EXPECT_EQ(c->summary, "pmu-soft, faults; not damon: no DAMON vaddr: paddr only");
  const std::vector<SourceKind> unregistered = {SourceKind::kIdlePage};
  auto bad = agent::select_sources(reg, unregistered, std::nullopt);
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().message, "hotness source 'idle' in sources.use is not registered");
}

TEST(SourceRegistry, ForcedSourceMustBeAvailable) {
  const auto reg = registry();
  auto forced = agent::select_sources(reg, {}, SourceKind::kPmuSoft);
  ASSERT_TRUE(forced);
  ASSERT_EQ(forced->sources.size(), 1U);
  EXPECT_EQ(forced->sources[0].source->name(), "pmu-soft");
  EXPECT_EQ(forced->summary, "pmu-soft (forced by config)");
  auto no = agent::select_sources(reg, {}, SourceKind::kDamon);
  ASSERT_FALSE(no);
  EXPECT_EQ(
      no.error().message,
      "hotness source 'damon' (forced by config) cannot run here: no DAMON vaddr: paddr only");
  auto unknown = agent::select_sources(reg, {}, SourceKind::kIdlePage);
  ASSERT_FALSE(unknown);
  EXPECT_EQ(unknown.error().message, "hotness source 'idle' (forced by config) is not registered");
}

TEST(SourceRegistry, NothingAvailable) {
  SourceRegistry r;
  r.add(SourceFactory{
      .kind = SourceKind::kPmu, .summary = "", .make = [] {
        return std::make_unique<FixedSource>(SourceKind::kPmu, Availability{false, "no"});
      }});
  auto c = agent::select_sources(r, std::vector<SourceKind>{SourceKind::kPmu}, std::nullopt);
  ASSERT_FALSE(c);
  EXPECT_EQ(c.error().message, "no hotness source can run here; not pmu: no");
}

// Issue 13: as non-root every BPF source said "no CAP_BPF: ..." again.
TEST(SourceRegistry, OneReasonSharedBySeveralSourcesIsSaidOnce) {
  SourceRegistry r;
  const std::vector<SourceKind> use = {SourceKind::kPmu, SourceKind::kDamon, SourceKind::kFault,
                                       SourceKind::kIdlePage};
  for (const SourceKind kind : use) {
    const std::string why = kind == SourceKind::kIdlePage ? "no idle page tracking" : "no CAP_BPF";
    r.add(SourceFactory{.kind = kind, .summary = "", .make = [kind, why] {
                          return std::make_unique<FixedSource>(kind, Availability{false, why});
                        }});
  }
  auto c = agent::select_sources(r, use, std::nullopt);
  ASSERT_FALSE(c);
  EXPECT_EQ(c.error().message,
            "no hotness source can run here; not pmu, damon, faults: no CAP_BPF; not idle: no idle "
            "page tracking");
}

TEST(SourceRegistry, BuiltinsOnAnEmptyTreeSayWhy) {
  testing::Fixture t({testing::dir("proc"), testing::dir("sys")});
  SourceRegistry reg;
  agent::register_builtin_sources(reg, t.paths(), agent::SourceOptions{});
  const auto reports = agent::probe_sources(reg);
  ASSERT_EQ(reports.size(), 6U);
  for (const auto& r : reports) {
    EXPECT_FALSE(r.availability.ok) << policy::source_name(r.kind);
    const char* want = r.kind == SourceKind::kIdlePage    ? "CONFIG_IDLE_PAGE_TRACKING"
                       : r.kind == SourceKind::kSoftDirty ? "self/clear_refs"
                                                          : "no BTF";
    EXPECT_NE(r.availability.why.find(want), std::string::npos) << r.availability.why;
  }
}

TEST(SourceRegistry, EveryKindIsRegisteredAndNamedByTheConfig) {
  testing::Fixture t({testing::dir("proc"), testing::dir("sys")});
  SourceRegistry reg;
  agent::register_builtin_sources(reg, t.paths(), agent::SourceOptions{});
  for (const SourceKind kind :
       {SourceKind::kPmu, SourceKind::kPmuSoft, SourceKind::kFault, SourceKind::kDamon,
        SourceKind::kIdlePage, SourceKind::kSoftDirty}) {
    const auto* f = reg.find(kind);
    ASSERT_NE(f, nullptr) << policy::source_name(kind);
    EXPECT_EQ(f->make()->kind(), kind);
    EXPECT_EQ(policy::source_kind(policy::source_name(kind)), kind);
  }
  EXPECT_FALSE(policy::source_kind("ebpf-magic"));
}

// Issue 14: no [sources] key parsed and then ignored. Each reaches its source.
TEST(SourceOptions, EveryKeyReachesItsSource) {
  auto cfg = policy::parse_config(R"([sources]
sample_period = 97
max_samples_per_sec = 1234
damon_sample_interval = "20ms"
damon_aggr_interval = "400ms"
damon_min_regions = 11
damon_max_regions = 222
idle_scan_interval = "30s"
dirty_scan_interval = "2s"
[[group]]
name = "g"
[group.select]
comm = ["^x$"]
)",
                                  "t.toml");
  ASSERT_TRUE(cfg) << cfg.error().front().to_string();
  const agent::SourceOptions o = agent::source_options(*cfg);
  EXPECT_EQ(o.pmu.sample_period, 97U);
  EXPECT_EQ(o.pmu_soft.sample_period, 97U);
  EXPECT_EQ(o.pmu.max_samples_per_sec, 1234U);
  EXPECT_EQ(o.pmu_soft.max_samples_per_sec, 1234U);
  EXPECT_EQ(o.pmu_soft.events, agent::PmuEventChoice::kSoftware);
  EXPECT_EQ(o.damon.sample_us, 20'000U);
  EXPECT_EQ(o.damon.aggr_us, 400'000U);
  EXPECT_EQ(o.damon.min_regions, 11U);
  EXPECT_EQ(o.damon.max_regions, 222U);
  EXPECT_EQ(o.idle.scan_interval, 30 * policy::kNsPerSec);
  EXPECT_EQ(o.dirty.scan_interval, 2 * policy::kNsPerSec);
  // "auto" DAMON intervals follow the shortest cold_age (10 s by default).
  auto plain =
      policy::parse_config("[[group]]\nname = \"g\"\n[group.select]\ncomm = [\"^x$\"]\n", "t.toml");
  ASSERT_TRUE(plain);
  EXPECT_EQ(agent::source_options(*plain).damon.sample_us, 1'000'000U);
  EXPECT_EQ(agent::source_options(*plain).damon.aggr_us, 5'000'000U);
}

// The soft-dirty source stands by while NUMA hint faults (the faults source with
// numa_balancing on) or PMU samples run: its write faults land in the workload;
// it runs where nothing else sees writes on the slow node. DAMON's rule is apart.
TEST(SourceRegistry, DirtyStandsByWhileHintFaultsOrPmuSeeTheSlowNode) {
  using agent::BalancingSeen;
  using agent::standby_reason;
  const std::vector<SourceKind> faults{SourceKind::kFault, SourceKind::kSoftDirty};
  const std::vector<SourceKind> pmu{SourceKind::kPmuSoft, SourceKind::kSoftDirty};
  const std::vector<SourceKind> alone{SourceKind::kDamon, SourceKind::kSoftDirty};
  const BalancingSeen on{.hint_faults = true, .hint_faults_in_dram = false};
  const BalancingSeen off{};
  EXPECT_EQ(standby_reason(SourceKind::kSoftDirty, faults, on),
            "NUMA hint faults (the faults source) see writes on slow nodes");
  EXPECT_EQ(standby_reason(SourceKind::kSoftDirty, faults, off), "")
      << "no hint faults without numa_balancing";
  EXPECT_EQ(standby_reason(SourceKind::kSoftDirty, pmu, off),
            "PMU samples see accesses on slow nodes");
  EXPECT_EQ(standby_reason(SourceKind::kSoftDirty, alone, on), "");
  EXPECT_EQ(standby_reason(SourceKind::kSoftDirty, faults,
                           {.hint_faults = true, .dirty_beside_faults = true}),
            "")
      << "[sources] dirty_beside_faults = true";
  EXPECT_EQ(standby_reason(SourceKind::kFault, faults, on), "") << "only dirty and damon stand by";
  EXPECT_EQ(standby_reason(SourceKind::kDamon, faults, on), "") << "bit 2 alone: DAMON runs";
  EXPECT_NE(standby_reason(SourceKind::kDamon, faults,
                           {.hint_faults = true, .hint_faults_in_dram = true}),
            "");
}

}  // namespace
}  // namespace kvtier
