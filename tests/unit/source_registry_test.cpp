#include <gtest/gtest.h>

#include "agent/sources/source_registry.hpp"
#include "unit/sources_scratch.hpp"

namespace kvtier {
namespace {

using agent::Availability;
using agent::SourceFactory;
using agent::SourceRegistry;

// Logic-only stand-in: the registry's choice depends on probe() alone.
class FixedSource final : public agent::HotnessSource {
 public:
  FixedSource(std::string name, Availability a) : name_(std::move(name)), a_(std::move(a)) {}
  [[nodiscard]] std::string_view name() const override { return name_; }
  [[nodiscard]] Availability probe() const override { return a_; }
  Result<void> start() override { return {}; }
  Result<void> set_targets(std::span<const Pid> /*pids*/) override { return {}; }
  Result<void> collect(TimeNs /*now*/, agent::SourceBatch& /*out*/) override { return {}; }
  void stop() override {}

 private:
  std::string name_;
  Availability a_;
};

SourceRegistry registry() {
  SourceRegistry r;
  auto add = [&r](std::string name, bool ok, std::string why) {
    r.add(SourceFactory{.name = name, .summary = "test", .make = [name, ok, why] {
                          return std::make_unique<FixedSource>(name, Availability{ok, why});
                        }});
  };
  add("pmu", false, "no PMU event: none");
  add("damon", false, "no DAMON vaddr: paddr only");
  add("faults", true, "ok: faults");
  add("pmu-soft", true, "ok: page-faults");
  return r;
}

TEST(SourceRegistry, PicksTheFirstAvailableAndSaysWhyNotTheOthers) {
  const auto reg = registry();
  auto c = agent::select_source(reg, {}, "");
  ASSERT_TRUE(c) << c.error().message;
  EXPECT_EQ(c->source->name(), "faults");
  EXPECT_EQ(
      c->reason,
      "faults: ok: faults; not pmu: no PMU event: none; not damon: no DAMON vaddr: paddr only");
  EXPECT_EQ(c->reports.size(), 3U);
}

TEST(SourceRegistry, PreferenceOrderFromConfig) {
  const auto reg = registry();
  const std::vector<std::string> prefer = {"pmu-soft", "faults"};
  auto c = agent::select_source(reg, prefer, "");
  ASSERT_TRUE(c);
  EXPECT_EQ(c->source->name(), "pmu-soft");
  const std::vector<std::string> unknown = {"ebpf-magic"};
  auto bad = agent::select_source(reg, unknown, "");
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().message.find("'ebpf-magic'"), std::string::npos);
}

TEST(SourceRegistry, ForcedSourceMustBeAvailable) {
  const auto reg = registry();
  auto forced = agent::select_source(reg, {}, "pmu-soft");
  ASSERT_TRUE(forced);
  EXPECT_EQ(forced->source->name(), "pmu-soft");
  EXPECT_NE(forced->reason.find("forced by config"), std::string::npos);
  auto no = agent::select_source(reg, {}, "damon");
  ASSERT_FALSE(no);
  EXPECT_EQ(
      no.error().message,
      "hotness source 'damon' (forced by config) cannot run here: no DAMON vaddr: paddr only");
  auto unknown = agent::select_source(reg, {}, "nope");
  ASSERT_FALSE(unknown);
  EXPECT_NE(unknown.error().message.find("known: pmu, damon, faults, pmu-soft"), std::string::npos);
}

TEST(SourceRegistry, NothingAvailable) {
  SourceRegistry r;
  r.add(SourceFactory{.name = "pmu", .summary = "", .make = [] {
                        return std::make_unique<FixedSource>("pmu", Availability{false, "no"});
                      }});
  auto c = agent::select_source(r, std::vector<std::string>{"pmu"}, "");
  ASSERT_FALSE(c);
  EXPECT_EQ(c.error().message, "no hotness source can run here; not pmu: no");
}

// Issue 13: as non-root every BPF source said "no CAP_BPF: ..." again.
TEST(SourceRegistry, OneReasonSharedBySeveralSourcesIsSaidOnce) {
  SourceRegistry r;
  for (const char* name : {"pmu", "damon", "faults", "idle"}) {
    const std::string why = std::string(name) == "idle" ? "no idle page tracking" : "no CAP_BPF";
    r.add(SourceFactory{.name = name, .summary = "", .make = [name, why] {
                          return std::make_unique<FixedSource>(name, Availability{false, why});
                        }});
  }
  const std::vector<std::string> prefer = {"pmu", "damon", "faults", "idle"};
  auto c = agent::select_source(r, prefer, "");
  ASSERT_FALSE(c);
  EXPECT_EQ(c.error().message,
            "no hotness source can run here; not pmu, damon, faults: no CAP_BPF; not idle: no idle "
            "page tracking");
}

TEST(SourceRegistry, BuiltinsOnAnEmptyTreeSayWhy) {
  testing::SourcesScratch t;
  SourceRegistry reg;
  agent::register_builtin_sources(reg, t.paths(), agent::SourceOptions{});
  const auto reports = agent::probe_sources(reg);
  ASSERT_EQ(reports.size(), 5U);
  for (const auto& r : reports) {
    EXPECT_FALSE(r.availability.ok) << r.name;
    const char* want = r.name == "idle" ? "CONFIG_IDLE_PAGE_TRACKING" : "no BTF";
    EXPECT_NE(r.availability.why.find(want), std::string::npos) << r.availability.why;
  }
  EXPECT_EQ(agent::default_source_order(),
            (std::vector<std::string>{"pmu", "damon", "faults", "pmu-soft", "idle"}));
}

}  // namespace
}  // namespace kvtier
