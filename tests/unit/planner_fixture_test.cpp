// The shipped config, compiled against topologies captured from the guest,
// planning through the token bucket: the path kvtierd takes, minus the kernel.

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>

#include "agent/host/topology_reader.hpp"
#include "policy/budget.hpp"
#include "policy/planner.hpp"

namespace kvtier::policy {
namespace {

constexpr TimeNs kSec = 1'000'000'000;
constexpr std::uint64_t kMiB = 1ULL << 20;
constexpr std::uint64_t kBase = 0x7f0000000000;

TEST(PlannerFixture, ShippedConfigOnTheHmatGuestDemotesToNodeOneAndPromotesBack) {
  const auto root = std::filesystem::path(KVTIER_FIXTURES) / "topology" / "hmat-guest";
  auto topo = agent::read_topology(agent::HostPaths::under(root));
  ASSERT_TRUE(topo) << topo.error().message;
  auto cfg = load_compiled_config(std::string(KVTIER_SOURCE_DIR) + "/systemd/kvtier.toml", &*topo);
  ASSERT_TRUE(cfg) << cfg.error().front().to_string();
  const Config& c = cfg->config;
  const auto group = cfg->group_of({.pid = 4242, .comm = "vllm"});
  ASSERT_TRUE(group);

  const TimeNs t0 = 5000 * kSec;
  TokenBucket bucket(c.limits.migrate_rate, c.limits.migrate_burst, t0);
  HeatTable heat({.half_life = c.groups[*group].policy.half_life});
  heat.track({kBase, kBase + 64 * kMiB}, 0, t0 - 600 * kSec);  // idle 10 minutes
  const AddrRange hot{kBase + 64 * kMiB, kBase + 68 * kMiB};
  heat.track(hot, 1, t0 - 600 * kSec);
  for (TimeNs t = t0 - 20 * kSec; t <= t0; t += kSec) {
    for (std::uint64_t a = hot.start; a < hot.end; a += kPageSize) {
      heat.add(AccessSample{
          .addr = a, .time = t, .weight = static_cast<std::uint32_t>(c.sources.sample_period)});
    }
  }
  bucket.refill(t0);
  const Snapshot snap{.topology = &*topo,
                      .groups = c.groups,
                      .limits = c.limits,
                      .targets = {TargetView{.pid = 4242, .group = *group, .heat = &heat}},
                      .now = t0,
                      .budget_bytes = bucket.available()};
  const Plan p = plan(snap);
  ASSERT_EQ(p.moves.size(), 2U);
  EXPECT_EQ(p.moves[0].range, (AddrRange{kBase, kBase + 64 * kMiB}));
  EXPECT_EQ(p.moves[0].from_node, 0);
  EXPECT_EQ(p.moves[0].to_node, 1);
  EXPECT_EQ(p.moves[0].reason, MoveReason::kColdAge);
  EXPECT_THAT(p.moves[0].why, ::testing::HasSubstr("idle 10m >= cold age 10s"));
  EXPECT_EQ(p.moves[1].range, hot);
  EXPECT_EQ(p.moves[1].to_node, 0);
  EXPECT_EQ(p.moves[1].reason, MoveReason::kHotPromotion);
  bucket.consume(p.demote_bytes + p.promote_bytes);
  EXPECT_EQ(bucket.available(), c.limits.migrate_burst - 68 * kMiB);
}

TEST(PlannerFixture, SmallCxlNodeStopsAtMinFree) {
  // The cxl-guest's node 1 has 384 MiB, all free: min_free 512 MiB leaves no room.
  const auto root = std::filesystem::path(KVTIER_FIXTURES) / "topology" / "cxl-guest";
  auto topo = agent::read_topology(agent::HostPaths::under(root));
  ASSERT_TRUE(topo) << topo.error().message;
  auto cfg = load_compiled_config(std::string(KVTIER_SOURCE_DIR) + "/systemd/kvtier.toml", &*topo);
  ASSERT_TRUE(cfg);
  HeatTable heat;
  heat.track({kBase, kBase + 8 * kMiB}, 0, 0);
  Snapshot snap{.topology = &*topo,
                .groups = cfg->config.groups,
                .limits = cfg->config.limits,
                .targets = {TargetView{.pid = 1, .group = 0, .heat = &heat}},
                .now = 1000 * kSec,
                .budget_bytes = 256 * kMiB};
  snap.limits.min_free = 512 * kMiB;
  Plan p = plan(snap);
  EXPECT_TRUE(p.moves.empty());
  ASSERT_FALSE(p.notes.empty());
  EXPECT_THAT(p.notes.back(), ::testing::HasSubstr("fill limit"));
  snap.limits.min_free = 64 * kMiB;
  p = plan(snap);
  EXPECT_EQ(p.demote_bytes, 8 * kMiB);
}

}  // namespace
}  // namespace kvtier::policy
