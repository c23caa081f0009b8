#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>

#include "fixture.hpp"

namespace kvtier {
namespace {

// Runs kvtierctl and returns its stdout and exit status.
std::pair<std::string, int> run(const std::string& args) {
  const std::string cmd =
      std::string(KVTIER_BUILD_DIR) + "/agent/kvtierctl " + args + " 2>/dev/null";
  FILE* p = popen(cmd.c_str(), "r");
  std::string out;
  char buf[4096];
  for (std::size_t n = 0; p != nullptr && (n = fread(buf, 1, sizeof(buf), p)) > 0;)
    out.append(buf, n);
  const int status = p != nullptr ? pclose(p) : -1;
  return {out, WIFEXITED(status) ? WEXITSTATUS(status) : -1};
}

TEST(KvtierctlSources, JsonOnAHostWithoutAnySourceSaysWhyAndFails) {
  testing::Fixture t({testing::dir("proc"), testing::dir("sys")});
  auto [out, rc] = run("--root " + t.paths().sys.parent_path().string() + " sources --json");
  EXPECT_EQ(rc, 1);
  const auto j = nlohmann::json::parse(out);
  ASSERT_EQ(j["sources"].size(), 6U);
  EXPECT_TRUE(j["chosen"].empty());
  EXPECT_NE(j["reason"].get<std::string>().find("no hotness source can run here"),
            std::string::npos);
  for (const auto& s : j["sources"]) {
    EXPECT_FALSE(s["available"].get<bool>()) << s["name"];
    EXPECT_FALSE(s["why"].get<std::string>().empty());
  }
  EXPECT_FALSE(j["process_watcher"]["available"].get<bool>());
}

TEST(KvtierctlSources, TableListsEverySource) {
  testing::Fixture t({testing::dir("proc"), testing::dir("sys")});
  auto [out, rc] = run("--root " + t.paths().sys.parent_path().string() + " sources");
  EXPECT_EQ(rc, 1);
  for (const char* name : {"pmu ", "damon ", "faults ", "pmu-soft ", "idle "}) {
    EXPECT_NE(out.find(std::string("\n") + name), std::string::npos) << name << " in\n" << out;
  }
}

}  // namespace
}  // namespace kvtier
