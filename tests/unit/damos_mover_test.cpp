#include "agent/movers/damos_mover.hpp"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "agent/host/sysfs.hpp"
#include "fixture.hpp"

namespace kvtier::agent {
namespace {

namespace fs = std::filesystem;

// A DAMON sysfs tree as the kernel lays it out for one kdamond, one context,
// one target with `regions` regions, and one scheme with `filters` filters.
// Files start empty (stats hold numbers): writes land in them.
class DamosTree {
 public:
  DamosTree(int regions, int filters) {
    const fs::path a = root_.path() / "sys/kernel/mm/damon/admin/kdamonds";
    file(a / "nr_kdamonds", "1");
    const fs::path k = a / "0";
    file(k / "state", "off");
    file(k / "contexts/nr_contexts");
    const fs::path c = k / "contexts/0";
    for (const char* f :
         {"operations", "monitoring_attrs/intervals/sample_us",
          "monitoring_attrs/intervals/aggr_us", "monitoring_attrs/intervals/update_us",
          "monitoring_attrs/nr_regions/min", "monitoring_attrs/nr_regions/max",
          "targets/nr_targets", "targets/0/pid_target", "targets/0/regions/nr_regions",
          "schemes/nr_schemes"}) {
      file(c / f);
    }
    for (int i = 0; i < regions; ++i) {
      file(c / "targets/0/regions" / std::to_string(i) / "start");
      file(c / "targets/0/regions" / std::to_string(i) / "end");
    }
    const fs::path s = c / "schemes/0";
    for (const char* f :
         {"action", "target_nid", "apply_interval_us", "access_pattern/sz/min",
          "access_pattern/sz/max", "access_pattern/nr_accesses/min",
          "access_pattern/nr_accesses/max", "access_pattern/age/min", "access_pattern/age/max",
          "quotas/ms", "quotas/bytes", "quotas/reset_interval_ms", "quotas/weights/sz_permil",
          "quotas/weights/nr_accesses_permil", "quotas/weights/age_permil", "watermarks/metric",
          "filters/nr_filters"}) {
      file(s / f);
    }
    for (int j = 0; j < filters; ++j) {
      for (const char* f :
           {"type", "matching", "memcg_path", "addr_start", "addr_end", "target_idx"}) {
        file(s / "filters" / std::to_string(j) / f);
      }
    }
    set_stats(0, 0, 0, 0, 0);
  }
  [[nodiscard]] HostPaths host() const { return root_.paths(); }
  [[nodiscard]] std::string at(const std::string& rel) const {
    auto t = read_text(root_.path() / "sys/kernel/mm/damon/admin/kdamonds/0" / rel);
    return t ? *t : "<" + t.error().message + ">";
  }
  void set_stats(std::uint64_t nr_tried, std::uint64_t sz_tried, std::uint64_t nr_applied,
                 std::uint64_t sz_applied, std::uint64_t qt) {
    const fs::path d =
        root_.path() / "sys/kernel/mm/damon/admin/kdamonds/0/contexts/0/schemes/0/stats";
    file(d / "nr_tried", std::to_string(nr_tried));
    file(d / "sz_tried", std::to_string(sz_tried));
    file(d / "nr_applied", std::to_string(nr_applied));
    file(d / "sz_applied", std::to_string(sz_applied));
    file(d / "qt_exceeds", std::to_string(qt));
  }
  [[nodiscard]] const fs::path& root() const { return root_.path(); }

 private:
  static void file(const fs::path& p, const std::string& content = "") {
    fs::create_directories(p.parent_path());
    std::ofstream(p) << content;
  }
  testing::Fixture root_;
};

DamosSetup cold_to_node1() {
  return DamosSetup{
      .sample_us = 5000,
      .aggr_us = 100000,
      .update_us = 1000000,
      .min_nr_regions = 10,
      .max_nr_regions = 2000,
      .regions = {AddrRange{.start = 0x100000, .end = 0x40000000}},
      .schemes = {DamosScheme{
          .action = DamosAction::kMigrateCold,
          .target_nid = 1,
          .pattern = {.nr_accesses_min = 0, .nr_accesses_max = 0, .age_min = 30},
          .quota =
              {.ms = 100, .bytes = 64 << 20, .reset_interval_ms = 1000, .weight_age_permil = 1000},
          .filters = {
              DamosFilter{
                  .type = DamosFilter::Type::kMemcg, .matching = false, .memcg_path = "/kvt"},
              DamosFilter{.type = DamosFilter::Type::kYoung, .matching = true}}}}};
}

TEST(DamosMover, WritesTheWholeTreeAndTurnsOn) {
  DamosTree tree(1, 2);
  DamosMover mover(tree.host(), cold_to_node1());
  auto r = mover.start();
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(tree.at("contexts/nr_contexts"), "1");
  EXPECT_EQ(tree.at("contexts/0/operations"), "paddr");
  EXPECT_EQ(tree.at("contexts/0/monitoring_attrs/intervals/aggr_us"), "100000");
  EXPECT_EQ(tree.at("contexts/0/monitoring_attrs/nr_regions/max"), "2000");
  EXPECT_EQ(tree.at("contexts/0/targets/nr_targets"), "1");
  EXPECT_EQ(tree.at("contexts/0/targets/0/pid_target"), "") << "paddr has no pid";
  EXPECT_EQ(tree.at("contexts/0/targets/0/regions/nr_regions"), "1");
  EXPECT_EQ(tree.at("contexts/0/targets/0/regions/0/start"), "1048576");
  EXPECT_EQ(tree.at("contexts/0/targets/0/regions/0/end"), "1073741824");
  const std::string s = "contexts/0/schemes/0/";
  EXPECT_EQ(tree.at("contexts/0/schemes/nr_schemes"), "1");
  EXPECT_EQ(tree.at(s + "action"), "migrate_cold");
  EXPECT_EQ(tree.at(s + "target_nid"), "1");
  EXPECT_EQ(tree.at(s + "access_pattern/nr_accesses/max"), "0");
  EXPECT_EQ(tree.at(s + "access_pattern/age/min"), "30");
  EXPECT_EQ(tree.at(s + "access_pattern/age/max"), "4294967295");
  EXPECT_EQ(tree.at(s + "access_pattern/sz/max"), "18446744073709551615");
  EXPECT_EQ(tree.at(s + "quotas/bytes"), std::to_string(64 << 20));
  EXPECT_EQ(tree.at(s + "quotas/ms"), "100");
  EXPECT_EQ(tree.at(s + "quotas/weights/age_permil"), "1000");
  EXPECT_EQ(tree.at(s + "watermarks/metric"), "none");
  EXPECT_EQ(tree.at(s + "filters/nr_filters"), "2");
  EXPECT_EQ(tree.at(s + "filters/0/type"), "memcg");
  EXPECT_EQ(tree.at(s + "filters/0/matching"), "N");
  EXPECT_EQ(tree.at(s + "filters/0/memcg_path"), "/kvt");
  EXPECT_EQ(tree.at(s + "filters/1/type"), "young");
  EXPECT_EQ(tree.at(s + "filters/1/matching"), "Y");
  // The last write after on is the stats refresh request.
  EXPECT_EQ(tree.at("state"), "update_schemes_stats");
  EXPECT_TRUE(mover.running());
  ASSERT_TRUE(mover.stop());
  EXPECT_EQ(tree.at("state"), "off");
}

TEST(DamosMover, MoveReportsWhatTheSchemeAppliedSinceLastCall) {
  DamosTree tree(1, 2);
  tree.set_stats(5, 100 * kPageSize, 4, 60 * kPageSize, 0);
  DamosMover mover(tree.host(), cold_to_node1());
  ASSERT_TRUE(mover.start());
  tree.set_stats(9, 300 * kPageSize, 8, 210 * kPageSize, 2);
  const auto st = mover.move(1, {}, 1);
  EXPECT_EQ(st.requested, 200U);
  EXPECT_EQ(st.moved, 150U);
  EXPECT_EQ(st.other, 50U);
  EXPECT_EQ(st.bytes_moved, 150 * kPageSize);
  // No scheme targets node 0: nothing reported for promotion.
  EXPECT_EQ(mover.move(1, {}, 0).requested, 0U);
  auto stats = mover.read_stats();
  ASSERT_TRUE(stats);
  EXPECT_EQ((*stats)[0].qt_exceeds, 2U);
  EXPECT_EQ((*stats)[0].nr_applied, 8U);
}

TEST(DamosMover, MissingKnobIsNamedWithTheKernelVersionHint) {
  DamosTree tree(1, 2);
  fs::remove(tree.root() / "sys/kernel/mm/damon/admin/kdamonds/0/contexts/0/schemes/0/target_nid");
  DamosMover mover(tree.host(), cold_to_node1());
  auto r = mover.start();
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("target_nid"), std::string::npos) << r.error().message;
  EXPECT_NE(r.error().message.find("6.11"), std::string::npos) << r.error().message;
  EXPECT_FALSE(mover.running());
  EXPECT_EQ(tree.at("state"), "off");
  // move() on a tree it cannot set up reports the errno and moves nothing.
  const auto st = mover.move(1, {}, 1);
  EXPECT_EQ(st.moved, 0U);
  EXPECT_EQ(st.last_errno, ENOENT);
}

TEST(DamosMover, ProbeAndNodeRangesAndMemcg) {
  testing::Fixture fx;
  const fs::path root = fx.path("absent");
  EXPECT_FALSE(DamosMover::probe(HostPaths::under(root)).ok);
  fs::create_directories(root / "sys/devices/system/memory");
  std::ofstream(root / "sys/devices/system/memory/block_size_bytes") << "8000000\n";
  for (int id : {0, 1, 2, 5, 6}) {
    fs::create_directories(root / "sys/devices/system/node/node1" /
                           ("memory" + std::to_string(id)));
  }
  fs::create_directories(root / "sys/devices/system/node/node1/memory_failure");
  auto ranges = DamosMover::node_physical_ranges(HostPaths::under(root), 1);
  ASSERT_TRUE(ranges) << ranges.error().message;
  ASSERT_EQ(ranges->size(), 2U);
  EXPECT_EQ((*ranges)[0], (AddrRange{.start = 0, .end = 3ULL * 0x8000000}));
  EXPECT_EQ((*ranges)[1], (AddrRange{.start = 5ULL * 0x8000000, .end = 7ULL * 0x8000000}));
  EXPECT_FALSE(DamosMover::node_physical_ranges(HostPaths::under(root), 3));

  fs::create_directories(root / "proc/77");
  std::ofstream(root / "proc/77/cgroup") << "0::/kvtier/llm\n";
  auto cg = DamosMover::memcg_path_of(HostPaths::under(root), 77);
  ASSERT_TRUE(cg);
  EXPECT_EQ(*cg, "/kvtier/llm");
  std::ofstream(root / "proc/77/cgroup", std::ios::trunc) << "1:name=systemd:/x\n";
  EXPECT_FALSE(DamosMover::memcg_path_of(HostPaths::under(root), 77));
}

}  // namespace
}  // namespace kvtier::agent
