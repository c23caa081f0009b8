// kvtierd and kvtierctl as programs: config check, capability failure,
// start, status, reload (good and bad), SIGTERM, kv-size.

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>

#include "fixture.hpp"
#include "privileged/daemon_test_util.hpp"
#include "privileged/kvtierd_process.hpp"

namespace kvtier::agent {
namespace {

using namespace std::chrono_literals;
using kvtier::testing::Fixture;
using testing::kBin;
using testing::Kvtierd;
using testing::minimal_config;
using testing::run;
using testing::slurp;
using testing::wait_for;

TEST(Kvtierd, CheckConfigValidInvalidMissing) {
  Fixture dir;
  std::ofstream(dir.path() / "good.toml") << minimal_config();
  std::ofstream(dir.path() / "bad.toml") << "[daemon]\ninterval = \n";
  auto r = run(kBin + "kvtierd --check-config --config " + (dir.path() / "good.toml").string());
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("configuration valid"), std::string::npos);
  r = run(kBin + "kvtierd --check-config --config " + (dir.path() / "bad.toml").string());
  EXPECT_EQ(r.code, 3) << r.out;
  EXPECT_NE(r.out.find("bad.toml:2:"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("<3>"), std::string::npos) << "no journal prefix for a person";
  r = run(kBin + "kvtierd --check-config --config " + (dir.path() / "none.toml").string());
  EXPECT_EQ(r.code, 3) << r.out;
  EXPECT_NE(r.out.find("none.toml:0: cannot read the file"), std::string::npos) << r.out;
  r = run(kBin + "kvtierd --no-such-flag");
  EXPECT_EQ(r.code, 2) << r.out;
}

TEST(Kvtierd, MissingCapabilityIsNamedAndExits4) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to run kvtierd with a reduced bounding set";
  if (run("command -v setpriv").code != 0) GTEST_SKIP() << "setpriv (util-linux) not installed";
  Fixture dir;
  std::ofstream(dir.path() / "k.toml") << minimal_config();
  // As root, execve grants exactly the bounding set: drop CAP_BPF from it.
  auto r = run("setpriv --bounding-set=-bpf " + kBin + "kvtierd --foreground --config " +
               (dir.path() / "k.toml").string() + " --socket " + (dir.path() / "s.sock").string());
  EXPECT_EQ(r.code, 4) << r.out;
  EXPECT_NE(r.out.find("missing capabilities: CAP_BPF ("), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("CAP_PERFMON"), std::string::npos) << r.out;
  EXPECT_FALSE(std::filesystem::exists(dir.path() / "s.sock"));
}

// Issue 14: with CAP_SYS_ADMIN gone too, CAP_BPF was no longer required at
// start: the sources were refused and kvtierd ran blind. Now: exit 4, one line.
TEST(Kvtierd, NoCapBpfForAConfiguredSourceExits4) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to run kvtierd with a reduced bounding set";
  if (run("command -v setpriv").code != 0) GTEST_SKIP() << "setpriv (util-linux) not installed";
  if (!std::filesystem::exists("/sys/kernel/btf/vmlinux")) {
    GTEST_SKIP() << "no BTF: the BPF sources are unsupported here, not refused for a capability";
  }
  Fixture dir;
  std::ofstream(dir.path() / "k.toml") << minimal_config("[sources]\nuse = [\"faults\"]\n");
  auto r = run("timeout 60 setpriv --inh-caps=-bpf,-sys_admin --bounding-set=-bpf,-sys_admin " +
               kBin + "kvtierd --foreground --config " + (dir.path() / "k.toml").string() +
               " --socket " + (dir.path() / "s.sock").string());
  EXPECT_EQ(r.code, 4) << r.out;
  EXPECT_NE(r.out.find("missing capability: no hotness source can run here; not faults: no "
                       "CAP_BPF: run kvtier as root or grant CAP_BPF and CAP_PERFMON"),
            std::string::npos)
      << r.out;
  EXPECT_FALSE(std::filesystem::exists(dir.path() / "s.sock"));
}

// Issue 14: a reload applies [sources] (new sources, the targets kept) and
// refuses, naming each key, what needs a restart; the running config stays.
TEST(Kvtierd, ReloadAppliesSourcesAndRefusesMoverKeysByName) {
  if (geteuid() != 0) GTEST_SKIP() << "kvtierd requires CAP_BPF and CAP_PERFMON";
  Fixture dir;
  const auto conf = dir.path() / "k.toml";
  const auto sock = dir.path() / "kvtierd.sock";
  std::ofstream(conf) << minimal_config("[sources]\nuse = [\"faults\"]\n");
  Kvtierd d({"--foreground", "--config", conf.string(), "--socket", sock.string()},
            dir.path() / "log");
  ASSERT_TRUE(wait_for([&] { return std::filesystem::exists(sock); })) << slurp(d.log);
  const std::string ctl = kBin + "kvtierctl --socket " + sock.string() + " ";
  const auto sources = [&] {
    const auto st = nlohmann::json::parse(run(ctl + "status --json").out, nullptr, false);
    std::string names;
    for (const auto& s : st["loop"]["sources"]) names += s["name"].get<std::string>() + " ";
    return names;
  };
  if (sources() != "faults ") GTEST_SKIP() << "the faults source cannot run here: " << slurp(d.log);
  const auto probed =
      nlohmann::json::parse(run(kBin + "kvtierctl sources --json").out, nullptr, false);
  bool soft = false;
  for (const auto& s : probed.value("sources", nlohmann::json::array())) {
    if (s.value("name", "") == "pmu-soft") soft = s.value("available", false);
  }
  if (!soft) GTEST_SKIP() << "pmu-soft cannot run here, nothing to reload to";

  std::ofstream(conf) << minimal_config(
      "[sources]\nuse = [\"faults\"]\n[mover]\nkind = "
      "\"dry-run\"\nbatch_pages = 7\n");
  ASSERT_EQ(kill(d.pid, SIGHUP), 0);
  ASSERT_TRUE(wait_for([&] { return slurp(d.log).find("reload rejected") != std::string::npos; }))
      << slurp(d.log);
  auto r = run(ctl + "status");
  EXPECT_NE(r.out.find("  rejected    " + conf.string() +
                       ": mover.kind, mover.batch_pages changed and need a restart (systemctl "
                       "restart kvtierd); nothing was applied\n"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("  reloads     1 (1 rejected), last "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(" ago, rejected\n"), std::string::npos) << r.out;

  std::ofstream(conf) << minimal_config("[sources]\nuse = [\"faults\", \"pmu-soft\"]\n");
  ASSERT_EQ(kill(d.pid, SIGHUP), 0);
  ASSERT_TRUE(wait_for([&] {
    return slurp(d.log).find("configuration reloaded") != std::string::npos;
  })) << slurp(d.log);
  EXPECT_EQ(sources(), "faults pmu-soft ") << slurp(d.log);
  EXPECT_NE(slurp(d.log).find("source faults stopped"), std::string::npos) << slurp(d.log);
  r = run(ctl + "status");
  EXPECT_NE(r.out.find(" ago, applied\n"), std::string::npos) << r.out;
  ASSERT_EQ(kill(d.pid, SIGTERM), 0);
  EXPECT_EQ(d.wait_exit(30s), 0) << slurp(d.log);
}

TEST(Kvtierd, RunsAnswersReloadsAndStopsOnSigterm) {
  if (geteuid() != 0) GTEST_SKIP() << "kvtierd requires CAP_BPF and CAP_PERFMON";
  Fixture dir;
  const auto conf = dir.path() / "k.toml";
  const auto sock = dir.path() / "kvtierd.sock";
  std::ofstream(conf) << minimal_config();
  Kvtierd d({"--foreground", "--config", conf.string(), "--socket", sock.string()},
            dir.path() / "log");
  ASSERT_TRUE(wait_for([&] { return std::filesystem::exists(sock); })) << slurp(d.log);

  const std::string ctl = kBin + "kvtierctl --socket " + sock.string() + " ";
  auto r = run(ctl + "status");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("kvtierd " KVTIER_VERSION " (pid " + std::to_string(d.pid) + ")"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("  placement   group "), std::string::npos) << r.out;
  r = run(ctl + "pause");
  EXPECT_EQ(r.out, "paused: no pages move until `kvtierctl resume`\n");
  r = run(ctl + "status --json");
  EXPECT_NE(r.out.find("\"paused\": true"), std::string::npos) << r.out;
  r = run(ctl + "resume");
  EXPECT_EQ(r.out, "resumed: pages move again\n");
  r = run(ctl + "dump --json");
  EXPECT_EQ(r.code, 0);
  EXPECT_NE(r.out.find("\"kvtier_node_memory_free_bytes\""), std::string::npos) << r.out;

  // A good reload, then a bad one: the daemon keeps running on the old config.
  ASSERT_EQ(kill(d.pid, SIGHUP), 0);
  ASSERT_TRUE(wait_for([&] {
    return slurp(d.log).find("configuration reloaded") != std::string::npos;
  })) << slurp(d.log);
  std::ofstream(conf) << "[daemon\n";
  ASSERT_EQ(kill(d.pid, SIGHUP), 0);
  ASSERT_TRUE(wait_for([&] { return slurp(d.log).find("reload rejected") != std::string::npos; }))
      << slurp(d.log);
  EXPECT_NE(slurp(d.log).find("reload: " + conf.string() + ":1:"), std::string::npos)
      << slurp(d.log);
  r = run(ctl + "status");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("(1 rejected)"), std::string::npos) << r.out;

  ASSERT_EQ(kill(d.pid, SIGTERM), 0);
  EXPECT_EQ(d.wait_exit(30s), 0) << slurp(d.log);
  EXPECT_FALSE(std::filesystem::exists(sock));
  EXPECT_NE(slurp(d.log).find("SIGTERM: stopping"), std::string::npos);

  r = run(ctl + "status");
  EXPECT_EQ(r.code, 3);
  EXPECT_EQ(r.out, "kvtierctl status: cannot connect to " + sock.string() +
                       ": No such file or directory (is kvtierd running?)\n");
}

TEST(Kvtierctl, KvSizeMatchesTheIssueFigures) {
  const std::string ctl = kBin + "kvtierctl ";
  auto r = run(ctl + "kv-size --model llama3-70b-mha --tokens 64K");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("KV cache   160 GiB"), std::string::npos) << r.out;
  r = run(ctl + "kv-size --layers 80 --kv-heads 64 --head-dim 128 --tokens 128K --json");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("\"total_bytes\": 343597383680"), std::string::npos) << r.out;
  r = run(ctl + "kv-size --model llama3-70b --tokens 1");
  EXPECT_NE(r.out.find("per token  320 KiB"), std::string::npos) << r.out;
  r = run(ctl + "kv-size --model nosuch --tokens 1");
  EXPECT_EQ(r.code, 2);
  r = run(ctl + "kv-size --model llama3-8b");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("--tokens is required"), std::string::npos);
}

// Built in a temp dir: node 0 DRAM with CPUs, node 1 memory-only in a lower tier.
void write_cxl_host(const std::filesystem::path& root) {
  const auto n = root / "sys/devices/system/node";
  std::filesystem::create_directories(n / "node0");
  std::filesystem::create_directories(n / "node1");
  std::filesystem::create_directories(root / "sys/devices/virtual/memory_tiering/memory_tier4");
  std::filesystem::create_directories(root / "sys/devices/virtual/memory_tiering/memory_tier22");
  std::ofstream(n / "online") << "0-1\n";
  std::ofstream(n / "possible") << "0-1\n";
  std::ofstream(n / "has_cpu") << "0\n";
  std::ofstream(n / "has_memory") << "0-1\n";
  std::ofstream(n / "node0/cpulist") << "0-3\n";
  std::ofstream(n / "node1/cpulist") << "\n";
  std::ofstream(n / "node0/distance") << "10 20\n";
  std::ofstream(n / "node1/distance") << "20 10\n";
  std::ofstream(n / "node0/meminfo") << "Node 0 MemTotal:       67108864 kB\n"
                                        "Node 0 MemFree:        33554432 kB\n";
  std::ofstream(n / "node1/meminfo") << "Node 1 MemTotal:       134217728 kB\n"
                                        "Node 1 MemFree:        134217728 kB\n";
  std::ofstream(root / "sys/devices/virtual/memory_tiering/memory_tier4/nodelist") << "0\n";
  std::ofstream(root / "sys/devices/virtual/memory_tiering/memory_tier22/nodelist") << "1\n";
}

TEST(Kvtierctl, KvSizeSplitsOverAFixtureWithACxlNode) {
  Fixture dir;
  write_cxl_host(dir.path());
  auto r = run(kBin + "kvtierctl --root " + dir.path().string() +
               " kv-size --model llama3-70b-mha --tokens 64K --dram-budget 16G");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("DRAM (node 0)        16 GiB"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("CXL (node 1)         128 GiB"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("does not fit         16 GiB"), std::string::npos) << r.out;
}

TEST(Kvtierctl, NodesLabelSaysWhetherTheHostHasCpuLessMemory) {
  Fixture dir;
  write_cxl_host(dir.path());
  const std::string nodes = kBin + "kvtierctl --root " + dir.path().string() + " nodes --label";
  auto r = run(nodes);
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(r.out, "kvtier.io/cxl-memory=true\n");
  // The same host with CPUs on node 1: no CPU-less memory.
  std::ofstream(dir.path() / "sys/devices/system/node/node1/cpulist") << "4-7\n";
  std::ofstream(dir.path() / "sys/devices/system/node/has_cpu") << "0-1\n";
  r = run(nodes);
  EXPECT_EQ(r.out, "kvtier.io/cxl-memory=false\n");
}

}  // namespace
}  // namespace kvtier::agent
