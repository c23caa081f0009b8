#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "agent/ctl/nodes_report.hpp"
#include "agent/host/topology_reader.hpp"
#include "fixture.hpp"
#include "policy/topology.hpp"

namespace kvtier {
namespace {
namespace fs = std::filesystem;
using agent::HostPaths;
using agent::read_topology;
using testing::Fixture;

const fs::path kFixtures = fs::path(KVTIER_FIXTURES) / "topology";

TEST(TopologyFixture, ThisHostHasOneNodeAndNoDemotionTarget) {
  auto topo = read_topology(HostPaths::under(kFixtures / "host"));
  ASSERT_TRUE(topo) << topo.error().message;
  ASSERT_EQ(topo->nodes.size(), 1U);
  const auto& n0 = topo->nodes[0];
  EXPECT_EQ(n0.id, 0);
  EXPECT_EQ(n0.cpus, (std::vector<int>{0, 1}));
  EXPECT_GT(n0.mem_total_bytes, 1ULL << 30);
  EXPECT_LE(n0.mem_free_bytes, n0.mem_total_bytes);
  EXPECT_EQ(n0.distance.at(0), 10);
  EXPECT_EQ(n0.memory_tier, 4);
  EXPECT_FALSE(n0.access.has_value());
  const auto roles = policy::classify_nodes(*topo);
  ASSERT_EQ(roles.size(), 1U);
  EXPECT_FALSE(roles[0].demotion_target);
  EXPECT_NE(roles[0].reason.find("has CPUs"), std::string::npos);
  EXPECT_EQ(policy::preferred_demotion_target(*topo, 0), std::nullopt);
}

TEST(TopologyFixture, HmatGuestNodeOneIsSlowerCpuLessDemotionTarget) {
  auto topo = read_topology(HostPaths::under(kFixtures / "hmat-guest"));
  ASSERT_TRUE(topo) << topo.error().message;
  ASSERT_EQ(topo->nodes.size(), 2U);
  const auto& n0 = topo->nodes[0];
  const auto& n1 = topo->nodes[1];
  EXPECT_EQ(n0.cpus, (std::vector<int>{0, 1}));
  EXPECT_TRUE(n1.cpus.empty());
  EXPECT_EQ(n0.distance.at(1), 20);
  ASSERT_TRUE(n1.access.has_value());
  EXPECT_EQ(n1.access->read_latency_ns, 250U);
  EXPECT_EQ(n1.access->read_bandwidth_mbps, 8192U);
  ASSERT_TRUE(n0.access.has_value());
  EXPECT_EQ(n0.access->read_latency_ns, 80U);
  ASSERT_TRUE(n0.memory_tier && n1.memory_tier);
  EXPECT_GT(*n1.memory_tier, *n0.memory_tier);
  const auto roles = policy::classify_nodes(*topo);
  EXPECT_FALSE(roles[0].demotion_target);
  EXPECT_TRUE(roles[1].demotion_target);
  EXPECT_NE(roles[1].reason.find("memory_tier"), std::string::npos);
  EXPECT_EQ(policy::preferred_demotion_target(*topo, 0), 1);
}

TEST(TopologyFixture, CxlGuestFindsTheOnlinedCxlNode) {
  auto topo = read_topology(HostPaths::under(kFixtures / "cxl-guest"));
  ASSERT_TRUE(topo) << topo.error().message;
  ASSERT_GE(topo->nodes.size(), 2U);
  const auto roles = policy::classify_nodes(*topo);
  int targets = 0;
  for (std::size_t i = 0; i < roles.size(); ++i) {
    if (!roles[i].demotion_target) continue;
    ++targets;
    EXPECT_TRUE(topo->nodes[i].cpus.empty());
    EXPECT_GT(topo->nodes[i].mem_total_bytes, 256ULL << 20);  // the 384 MiB onlined from dax0.0
  }
  EXPECT_EQ(targets, 1);
  EXPECT_TRUE(policy::preferred_demotion_target(*topo, 0).has_value());
}

TEST(TopologyJson, ReportsRoleAndAttributes) {
  auto topo = read_topology(HostPaths::under(kFixtures / "hmat-guest"));
  ASSERT_TRUE(topo) << topo.error().message;
  const auto j = agent::nodes_json(*topo);
  ASSERT_EQ(j["nodes"].size(), 2U);
  EXPECT_EQ(j["nodes"][1]["cpu_less"], true);
  EXPECT_EQ(j["nodes"][1]["demotion_target"], true);
  EXPECT_EQ(j["nodes"][1]["access"]["read_latency_ns"], 250);
  EXPECT_EQ(j["nodes"][0]["demotes_to"], 1);
  const auto table = agent::nodes_table(*topo);
  EXPECT_NE(table.find("demotes to node 1"), std::string::npos) << table;
}

TEST(TopologyErrors, MissingOnlineNamesFileAndHint) {
  Fixture tree;
  tree.copy("topology/hmat-guest");
  tree.remove("sys/devices/system/node/online");
  auto topo = read_topology(tree.paths());
  ASSERT_FALSE(topo);
  EXPECT_NE(topo.error().message.find("devices/system/node/online"), std::string::npos);
  EXPECT_NE(topo.error().message.find("sysfs"), std::string::npos);
  EXPECT_EQ(topo.error().code, ENOENT);
}

TEST(TopologyErrors, MalformedFilesAreNamed) {
  const std::pair<const char*, const char*> cases[] = {
      {"devices/system/node/online", "zero-one"},
      {"devices/system/node/node1/cpulist", "3-1"},
      {"devices/system/node/node0/meminfo", "Node 0 MemTotal: lots kB\n"},
      {"devices/system/node/node1/meminfo", "Node 1 MemFree: 5 kB\n"},
      {"devices/system/node/node0/distance", "10"},
      {"devices/system/node/node0/distance", "10 x"},
      {"devices/system/node/node1/access0/initiators/read_latency", "slow"},
      {"devices/virtual/memory_tiering/memory_tier4/nodelist", "0-"},
  };
  for (const auto& [file, text] : cases) {
    Fixture tree;
    tree.copy("topology/hmat-guest");
    tree.write(std::string("sys/") + file, text);
    auto topo = read_topology(tree.paths());
    ASSERT_FALSE(topo) << file << " <- " << text;
    EXPECT_NE(topo.error().message.find(file), std::string::npos) << topo.error().message;
  }
}

TEST(TopologyErrors, MissingOptionalPartsAreNotErrors) {
  Fixture tree;
  tree.copy("topology/hmat-guest");
  tree.remove("sys/devices/virtual/memory_tiering");
  tree.remove("sys/devices/system/node/node1/access0");
  auto topo = read_topology(tree.paths());
  ASSERT_TRUE(topo) << topo.error().message;
  EXPECT_FALSE(topo->nodes[1].memory_tier.has_value());
  EXPECT_FALSE(topo->nodes[1].access.has_value());
  // Without tiers, distance 20 > local 10 still makes node 1 the target.
  const auto roles = policy::classify_nodes(*topo);
  EXPECT_TRUE(roles[1].demotion_target);
  EXPECT_NE(roles[1].reason.find("distance"), std::string::npos);
}

// Pure classification rules, on hand-made topologies.
policy::NumaNode node(int id, std::vector<int> cpus, std::map<int, int> dist,
                      std::optional<int> tier) {
  return policy::NumaNode{.id = id,
                          .cpus = std::move(cpus),
                          .mem_total_bytes = 1ULL << 30,
                          .mem_free_bytes = 1ULL << 29,
                          .distance = std::move(dist),
                          .memory_tier = tier};
}

// /proc/zoneinfo as the 6.12 benchmark guest prints it (trimmed): every node
// lists every zone, populated or not (a zone's protection entries follow that
// order); node 0 has DMA and DMA32, node 1 Normal only; pagesets' "high:" lines
// are not the watermark.
constexpr const char* kZoneinfo = R"(Node 0, zone      DMA
  per-node stats
      nr_inactive_anon 10
  pages free     3776
        boost    0
        min      190
        low      237
        high     284
        promo    331
        managed  3840
        protection: (0, 1918, 1918, 1918, 1918)
  pagesets
    cpu: 0
              count:    0
              high:     0
Node 0, zone    DMA32
  pages free     30155
        boost    100
        min      2434
        low      3042
        high     3650
        managed  50682
        protection: (0, 0, 0, 0, 0)
  pagesets
    cpu: 0
              count:    57
              high:     378
Node 0, zone   Normal
  pages free     0
        boost    0
        high     0
        protection: (0, 0, 0, 0, 0)
Node 0, zone  Movable
  pages free     0
        boost    0
        high     32
        protection: (0, 0, 0, 0, 0)
Node 1, zone      DMA
  pages free     0
        boost    0
        high     0
        protection: (0, 0, 0, 0, 0)
Node 1, zone    DMA32
  pages free     0
        boost    0
        high     0
        protection: (0, 0, 0, 0, 0)
Node 1, zone   Normal
  pages free     1000
        boost    0
        high     1500
        protection: (0, 0, 0, 0, 0)
Node 1, zone  Movable
  pages free     0
        boost    0
        high     0
        protection: (0, 0, 0, 0, 0)
)";

TEST(ZoneReserves, FreeUpToTheHighWatermarkBoostAndMovableReserve) {
  auto r = agent::parse_zone_reserves(kZoneinfo, 4096, "zoneinfo");
  ASSERT_TRUE(r) << r.error().message;
  ASSERT_EQ(r->size(), 2U);
  // Node 0: DMA min(3776, 284 + 1918) + DMA32 min(30155, 3650 + 100) + Normal 0 + Movable 0.
  EXPECT_EQ(r->at(0), (2202U + 3750U) * 4096);
  // Node 1: Normal has less free than its high watermark: all of it is reserved.
  EXPECT_EQ(r->at(1), 1000U * 4096);
}

TEST(ZoneReserves, MalformedZoneinfoIsNamed) {
  for (const char* text : {"Node x, zone DMA\n  pages free 1\n  high 1\n",
                           "Node 0, zone DMA\n  pages free many\n        high 1\n",
                           "Node 0, zone DMA\n  pages free 1\n        protection: (0, x)\n",
                           "Node 0, zone DMA\n  pages free 1\n"}) {
    auto r = agent::parse_zone_reserves(text, 4096, "/proc/zoneinfo");
    ASSERT_FALSE(r) << text;
    EXPECT_NE(r.error().message.find("/proc/zoneinfo"), std::string::npos) << r.error().message;
  }
}

// A promotion tick reads only memory again: free and reserved change, the
// rest of the topology is what the cycle's full read found; a node that went
// away is an error naming its meminfo.
TEST(RefreshNodeMemory, ReadsFreeAndReserveAgainAndNothingElse) {
  Fixture tree;
  tree.copy("topology/hmat-guest");
  auto topo = read_topology(tree.paths());
  ASSERT_TRUE(topo) << topo.error().message;
  ASSERT_EQ(topo->nodes.size(), 2U);
  EXPECT_EQ(topo->nodes[1].mem_free_bytes, 1011472ULL * 1024);
  EXPECT_EQ(topo->nodes[1].mem_reserved_bytes, 0U);  // the fixture has no zoneinfo
  const auto distance = topo->nodes[1].distance;
  const auto cpus = topo->nodes[0].cpus;

  tree.write("sys/devices/system/node/node1/meminfo",
             "Node 1 MemTotal:        1029816 kB\nNode 1 MemFree:          500000 kB\n");
  tree.write("proc/zoneinfo", kZoneinfo);
  // Not read by a refresh: a broken distance file changes nothing.
  tree.write("sys/devices/system/node/node1/distance", "garbage\n");
  ASSERT_TRUE(agent::refresh_node_memory(tree.paths(), *topo));
  EXPECT_EQ(topo->nodes[1].mem_total_bytes, 1029816ULL * 1024);
  EXPECT_EQ(topo->nodes[1].mem_free_bytes, 500000ULL * 1024);
  EXPECT_EQ(topo->nodes[1].mem_reserved_bytes, 1000U * 4096);  // Normal: all its free pages
  EXPECT_EQ(topo->nodes[0].mem_reserved_bytes, (2202U + 3750U) * 4096);
  EXPECT_EQ(topo->nodes[1].distance, distance);
  EXPECT_EQ(topo->nodes[0].cpus, cpus);

  tree.remove("sys/devices/system/node/node1");
  auto gone = agent::refresh_node_memory(tree.paths(), *topo);
  ASSERT_FALSE(gone);
  EXPECT_NE(gone.error().message.find("node1/meminfo"), std::string::npos) << gone.error().message;
}

// This host's own /proc/zoneinfo and sysfs: every node gets its reserve, never
// more than its free memory, and on node 0 some (its high watermarks are not 0).
TEST(ZoneReserves, ThisHostsZoneinfoReadsBack) {
  auto topo = read_topology(HostPaths{});
  ASSERT_TRUE(topo) << topo.error().message;
  ASSERT_FALSE(topo->nodes.empty());
  for (const auto& n : topo->nodes) {
    EXPECT_LE(n.mem_reserved_bytes, n.mem_free_bytes) << "node " << n.id;
    EXPECT_EQ(n.usable_free_bytes(), n.mem_free_bytes - n.mem_reserved_bytes);
  }
  EXPECT_GT(topo->nodes[0].mem_reserved_bytes, 0U);
}

TEST(ClassifyNodes, SameTierCpuLessNodeIsNotATarget) {
  policy::Topology t{
      .nodes = {node(0, {0}, {{0, 10}, {1, 20}}, 4), node(1, {}, {{0, 20}, {1, 10}}, 4)}};
  const auto roles = policy::classify_nodes(t);
  EXPECT_FALSE(roles[1].demotion_target);
  EXPECT_NE(roles[1].reason.find("not below"), std::string::npos);
}

TEST(ClassifyNodes, NearCpuLessNodeWithoutTiersIsNotATarget) {
  policy::Topology t{.nodes = {node(0, {0}, {{0, 10}, {1, 10}}, std::nullopt),
                               node(1, {}, {{0, 10}, {1, 10}}, std::nullopt)}};
  EXPECT_FALSE(policy::classify_nodes(t)[1].demotion_target);
}

TEST(ClassifyNodes, NearestOfTwoTargetsIsPreferred) {
  policy::Topology t{.nodes = {node(0, {0}, {{0, 10}, {1, 30}, {2, 20}}, 4),
                               node(1, {}, {{0, 30}, {1, 10}, {2, 30}}, 35),
                               node(2, {}, {{0, 20}, {1, 30}, {2, 10}}, 35)}};
  EXPECT_EQ(policy::preferred_demotion_target(t, 0), 2);
}

TEST(ClassifyNodes, MemorylessNodeIsNotATarget) {
  auto n1 = node(1, {}, {{0, 20}, {1, 10}}, 35);
  n1.mem_total_bytes = 0;
  policy::Topology t{.nodes = {node(0, {0}, {{0, 10}, {1, 20}}, 4), n1}};
  EXPECT_FALSE(policy::classify_nodes(t)[1].demotion_target);
}

// Issue 37: memory offlined and onlined at run time, a node that comes and goes.
TEST(TopologyChanges, NodeMemoryOfflinedThenOnlinedAgain) {
  const auto n0 = node(0, {0}, {{0, 10}, {1, 20}}, 4);
  const auto n1 = node(1, {}, {{0, 20}, {1, 10}}, 35);
  const policy::Topology full{.nodes = {n0, n1}};
  // The first read (nothing before) is no change: kvtierd logs every node's role at start.
  EXPECT_TRUE(policy::topology_changes({}, full).empty());
  EXPECT_TRUE(policy::topology_changes(full, full).empty());

  auto half1 = n1;
  half1.mem_total_bytes = n1.mem_total_bytes / 2;
  const policy::Topology half{.nodes = {n0, half1}};
  auto c = policy::topology_changes(full, half);
  ASSERT_EQ(c.size(), 1U);
  EXPECT_EQ(c[0].node, 1);
  EXPECT_TRUE(c[0].demotion_target);
  EXPECT_FALSE(c[0].lost_target);
  EXPECT_NE(c[0].line.find("memory online 1024 -> 512 MiB"), std::string::npos) << c[0].line;

  auto none1 = n1;
  none1.mem_total_bytes = 0;
  const policy::Topology none{.nodes = {n0, none1}};
  c = policy::topology_changes(half, none);
  ASSERT_EQ(c.size(), 1U);
  EXPECT_TRUE(c[0].lost_target);
  EXPECT_FALSE(c[0].demotion_target);
  EXPECT_EQ(c[0].reason, "no memory online");
  EXPECT_EQ(c[0].line,
            "node 1 is no longer a demotion target (memory online 512 -> 0 MiB; no memory "
            "online): kvtier demotes nothing there until it is one again");

  c = policy::topology_changes(none, full);
  ASSERT_EQ(c.size(), 1U);
  EXPECT_TRUE(c[0].demotion_target);
  EXPECT_FALSE(c[0].lost_target);
  EXPECT_NE(c[0].line.find("node 1 is a demotion target again (memory online 0 -> 1024 MiB"),
            std::string::npos)
      << c[0].line;
}

TEST(TopologyChanges, NodeThatAppearsOrGoes) {
  const auto n0 = node(0, {0}, {{0, 10}, {2, 20}}, 4);
  const auto n2 = node(2, {}, {{0, 20}, {2, 10}}, 35);
  const policy::Topology one{.nodes = {n0}};
  const policy::Topology two{.nodes = {n0, n2}};
  auto c = policy::topology_changes(one, two);
  ASSERT_EQ(c.size(), 1U);
  EXPECT_EQ(c[0].node, 2);
  EXPECT_TRUE(c[0].demotion_target);
  EXPECT_NE(c[0].line.find("node 2 appeared (1024 MiB): a demotion target"), std::string::npos)
      << c[0].line;
  c = policy::topology_changes(two, one);
  ASSERT_EQ(c.size(), 1U);
  EXPECT_TRUE(c[0].lost_target);
  EXPECT_EQ(c[0].line,
            "node 2 went offline (1024 MiB): it was a demotion target; kvtier demotes nothing "
            "there");
}

}  // namespace
}  // namespace kvtier
