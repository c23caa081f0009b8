#include "agent/host/procfs.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <fstream>
#include <future>
#include <thread>

#include "fixture.hpp"

namespace kvtier::agent {
namespace {

const HostPaths kFixture = HostPaths::under(std::filesystem::path(KVTIER_FIXTURES) / "procfs");

TEST(Procfs, ListsNumericEntriesOnly) {
  auto pids = list_pids(kFixture);
  std::ranges::sort(pids);
  EXPECT_EQ(pids, (std::vector<Pid>{17, 4242}));
}

TEST(Procfs, ReadsSelectorFields) {
  auto info = read_process(kFixture, 4242);
  ASSERT_TRUE(info) << info.error().message;
  EXPECT_EQ(info->comm, "python3");
  EXPECT_EQ(info->cmdline,
            "python3 -m vllm.entrypoints.openai.api_server --model meta-llama/Llama-3-8B");
  EXPECT_EQ(info->exe, "/usr/bin/python3.11");
  EXPECT_EQ(info->cgroup, "/system.slice/vllm.service");
}

TEST(Procfs, VanishedProcessIsEsrch) {
  auto info = read_process(kFixture, 999999);
  ASSERT_FALSE(info);
  EXPECT_EQ(info.error().code, ESRCH);
  auto maps = read_maps(kFixture, 999999);
  ASSERT_FALSE(maps);
  EXPECT_EQ(maps.error().code, ESRCH);
}

TEST(Procfs, MapsAndMovableAnon) {
  auto maps = read_maps(kFixture, 4242);
  ASSERT_TRUE(maps) << maps.error().message;
  ASSERT_EQ(maps->size(), 7U);
  EXPECT_EQ((*maps)[2].range.start, 0x7f2a40000000ULL);
  EXPECT_EQ((*maps)[2].range.bytes(), 1ULL << 30);
  EXPECT_EQ((*maps)[1].path, "[heap]");
  std::vector<std::string> movable;
  for (const auto& e : *maps) {
    if (is_movable_anon(e)) movable.push_back(e.path.empty() ? "anon" : e.path);
  }
  // heap and the anonymous 1 GiB pool; not shared, stack, vdso or file mappings.
  EXPECT_EQ(movable, (std::vector<std::string>{"[heap]", "anon"}));
}

TEST(Procfs, CgroupIsTheCgroup2Line) {
  auto cg = read_cgroup(kFixture, 4242);
  ASSERT_TRUE(cg) << cg.error().message;
  EXPECT_EQ(*cg, "/system.slice/vllm.service");
  // 17 has no cgroup file: like a process that just exited.
  auto gone = read_cgroup(kFixture, 17);
  ASSERT_FALSE(gone);
  EXPECT_EQ(gone.error().code, ESRCH);
}

// The real /proc: this test's own process, with one more thread while it runs.
TEST(Procfs, ThreadCountFollowsTheProcess) {
  const HostPaths host;
  auto before = read_thread_count(host, getpid());
  ASSERT_TRUE(before) << before.error().message;
  std::promise<void> done;
  std::thread extra([f = done.get_future()]() mutable { f.wait(); });
  auto during = read_thread_count(host, getpid());
  done.set_value();
  extra.join();
  ASSERT_TRUE(during) << during.error().message;
  EXPECT_EQ(*during, *before + 1);
  auto gone = read_thread_count(kFixture, 999999);
  ASSERT_FALSE(gone);
  EXPECT_EQ(gone.error().code, ESRCH);
}

TEST(Procfs, CgroupV1OnlyIsAnErrorNamingTheFile) {
  const testing::Fixture root({testing::dir(
      "proc", {testing::dir("5", {testing::file("cgroup", "1:name=systemd:/x\n")})})});
  auto cg = read_cgroup(root.paths(), 5);
  ASSERT_FALSE(cg);
  EXPECT_NE(cg.error().message.find("proc/5/cgroup: no cgroup2 line"), std::string::npos)
      << cg.error().message;
}

TEST(Procfs, MalformedMapsNamesFileAndLine) {
  auto maps = read_maps(kFixture, 17);
  ASSERT_FALSE(maps);
  EXPECT_NE(maps.error().message.find("17/maps:1"), std::string::npos) << maps.error().message;
}

TEST(Procfs, LiveSelfIsReadable) {
  auto info = read_process(HostPaths{}, getpid());
  ASSERT_TRUE(info) << info.error().message;
  EXPECT_FALSE(info->comm.empty());
  EXPECT_NE(info->exe.find("unit_"), std::string::npos) << info->exe;
  auto maps = read_maps(HostPaths{}, getpid());
  ASSERT_TRUE(maps) << maps.error().message;
  EXPECT_TRUE(std::ranges::any_of(*maps, is_movable_anon));
}

}  // namespace
}  // namespace kvtier::agent
