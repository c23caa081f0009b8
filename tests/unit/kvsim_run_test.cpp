// The kvsim program for real: short runs over the fixture traces and the real traces the
// repository ships in bench/traces; fault injection must fail the run; SIGUSR1 must write the
// truth.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

const fs::path kFixtures = fs::path(KVTIER_FIXTURES) / "kvsim";
const fs::path kTraces = KVTIER_TRACES;

struct RunResult {
  int status = -1;
  std::vector<json> events;  // stdout, one JSON object a line
  std::string raw;

  [[nodiscard]] const json* last(const std::string& event) const {
    for (auto it = events.rbegin(); it != events.rend(); ++it) {
      if ((*it)["event"] == event) return &*it;
    }
    return nullptr;
  }
};

RunResult run_kvsim(const std::string& args) {
  RunResult r;
  const std::string cmd = std::string(KVTIER_KVSIM_BIN) + " " + args + " 2>/dev/null";
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return r;
  char buf[65536];
  while (fgets(buf, sizeof buf, p) != nullptr) r.raw += buf;
  const int st = pclose(p);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  std::istringstream lines(r.raw);
  std::string line;
  while (std::getline(lines, line)) {
    auto j = json::parse(line, nullptr, false);
    if (!j.is_discarded()) r.events.push_back(std::move(j));
  }
  return r;
}

fs::path temp_dir(const std::string& name) {
  fs::path d = fs::temp_directory_path() / (name + "_" + std::to_string(getpid()));
  fs::create_directories(d);
  return d;
}

void expect_clean_run(const RunResult& r) {
  ASSERT_EQ(r.status, 0) << r.raw;
  const json* start = r.last("start");
  ASSERT_NE(start, nullptr) << r.raw;
  EXPECT_GT((*start)["pid"].get<int>(), 0);
  EXPECT_LT((*start)["pool"][0].get<std::uint64_t>(), (*start)["pool"][1].get<std::uint64_t>());
  const json* end = r.last("end");
  ASSERT_NE(end, nullptr) << r.raw;
  EXPECT_EQ((*end)["result"], "ok");
  EXPECT_EQ((*end)["corrupted_bytes"], 0);
  EXPECT_GT((*end)["steps_per_s"].get<double>(), 0.0);
  EXPECT_GT((*end)["read_bytes_per_s"].get<double>(), 0.0);
  EXPECT_GT((*end)["verified_bytes"].get<std::uint64_t>(), 0U);
  ASSERT_NE(r.last("stats"), nullptr);
}

TEST(KvsimRun, ShortMooncakeRunIsCleanAndWritesTruth) {
  const fs::path dir = temp_dir("kvsim_run");
  const RunResult r = run_kvsim(
      "--trace " + (kFixtures / "mini_mooncake.jsonl").string() +
      " --kv-budget 32MiB --capacity-tokens 262144 --duration 2 --step-ms 5 --time-scale 0.5"
      " --stats-interval 0.5 --truth " +
      (dir / "truth.csv").string());
  expect_clean_run(r);
  const json& end = *r.last("end");
  EXPECT_GT(end["hit_blocks"].get<int>(), 0);  // the shared prefixes were reused
  EXPECT_EQ(end["admitted"], 40);
  EXPECT_EQ(end["finished"], 40);
  // The truth file: a header and one row per chunk, the active and cached ones accessed.
  std::ifstream csv(dir / "truth.csv");
  std::string line;
  std::getline(csv, line);
  EXPECT_EQ(line, "block,tensor,start,end,state,last_access_ns,accesses,writes,episode_start_ns");
  int rows = 0;
  int touched = 0;
  while (std::getline(csv, line)) {
    ++rows;
    if (line.find(",0,0") == std::string::npos) ++touched;
  }
  const json& start = *r.last("start");
  EXPECT_EQ(rows, start["sim"]["blocks"].get<int>() * start["sim"]["tensors"].get<int>());
  EXPECT_GT(touched, 0);
  fs::remove_all(dir);
}

TEST(KvsimRun, ReadNodesAccountingPlacesEveryReadByte) {
  // move_pages for real on this host: every page read is resident (the pool is pre-faulted),
  // so every sampled byte lands on some node, and every second step is sampled.
  const RunResult r = run_kvsim("--trace " + (kFixtures / "mini_mooncake.jsonl").string() +
                                " --kv-budget 32MiB --capacity-tokens 262144 --duration 2"
                                " --step-ms 5 --time-scale 0.5 --read-nodes-every 2");
  expect_clean_run(r);
  const json& end = *r.last("end");
  const json& rn = end["read_nodes"];
  const auto steps = end["steps"].get<std::uint64_t>();
  EXPECT_EQ(rn["sampled_steps"].get<std::uint64_t>(), (steps + 1) / 2);
  const auto sampled = rn["sampled_read_bytes"].get<std::uint64_t>();
  EXPECT_GT(sampled, 0U);
  EXPECT_LT(sampled, end["read_bytes"].get<std::uint64_t>());
  EXPECT_EQ(rn["unplaced_bytes"], 0);
  std::uint64_t placed = 0;
  for (const auto& [node, bytes] : rn["by_node"].items()) placed += bytes.get<std::uint64_t>();
  EXPECT_EQ(placed, sampled);
  // A 2 s run: every read came less than the 5 s reaction window into its block's episode.
  EXPECT_EQ(rn["reaction_window_s"], 5.0);
  EXPECT_EQ(rn["episode_gap_s"], 10.0);
  for (const auto& [node, bytes] : rn["late_by_node"].items()) EXPECT_EQ(bytes, 0) << node;
  // With no window every read is late.
  const RunResult all_late = run_kvsim("--trace " + (kFixtures / "mini_mooncake.jsonl").string() +
                                       " --kv-budget 32MiB --capacity-tokens 262144 --duration 1"
                                       " --step-ms 5 --read-nodes-every 1 --reaction-window 0"
                                       " --cold-ages 30,20");
  expect_clean_run(all_late);
  const json& rn0 = (*all_late.last("end"))["read_nodes"];
  EXPECT_GT(rn0["sampled_read_bytes"].get<std::uint64_t>(), 0U);
  EXPECT_EQ(rn0["late_by_node"], rn0["by_node"]);
  EXPECT_EQ(rn0["episode_gap_s"], 20.0) << "the shortest cold age";
  // Off by default: nothing sampled.
  const RunResult off = run_kvsim("--trace " + (kFixtures / "mini_mooncake.jsonl").string() +
                                  " --kv-budget 32MiB --capacity-tokens 262144 --duration 1"
                                  " --step-ms 5");
  expect_clean_run(off);
  EXPECT_EQ((*off.last("end"))["read_nodes"]["sampled_steps"], 0);
}

TEST(KvsimRun, ShortAzureRunIsClean) {
  expect_clean_run(run_kvsim("--trace " + (kFixtures / "mini_azure.csv").string() +
                             " --kv-budget 16MiB --capacity-tokens 131072 --duration 2 --step-ms 5"
                             " --lines-per-page 64"));
}

TEST(KvsimRun, InjectedCorruptionFailsTheRun) {
  const RunResult r =
      run_kvsim("--trace " + (kFixtures / "mini_mooncake.jsonl").string() +
                " --kv-budget 32MiB --capacity-tokens 262144 --duration 1 --step-ms 5"
                " --inject-corruption 5");
  EXPECT_EQ(r.status, 3) << r.raw;
  const json* injected = r.last("injected");
  ASSERT_NE(injected, nullptr) << r.raw;
  const json* found = r.last("corruption");
  ASSERT_NE(found, nullptr) << r.raw;
  EXPECT_EQ((*found)["addr"], (*injected)["addr"]);
  EXPECT_EQ((*found)["bad_bytes"], 1);
  EXPECT_EQ((*r.last("end"))["result"], "corrupt");
}

TEST(KvsimRun, BadInputIsAOneLineErrorNotACrash) {
  const fs::path dir = temp_dir("kvsim_bad");
  {
    std::ofstream(dir / "bad.jsonl")
        << R"({"timestamp": 0, "input_length": 10, "output_length": 1, "hash_ids": [1]})"
        << "\n{oops\n";
  }
  const std::string cmd = std::string(KVTIER_KVSIM_BIN) + " --trace " +
                          (dir / "bad.jsonl").string() + " 2>&1 >/dev/null";
  FILE* p = popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  char buf[4096] = {};
  const std::size_t n = fread(buf, 1, sizeof buf - 1, p);
  const int st = pclose(p);
  EXPECT_EQ(WEXITSTATUS(st), 1);
  EXPECT_THAT(std::string(buf, n), ::testing::HasSubstr("bad.jsonl:2: not a JSON object"));
  EXPECT_EQ(run_kvsim("--trace " + (dir / "bad.jsonl").string() + " --lines-per-page 0").status, 2);
  fs::remove_all(dir);
}

// Threads: from /proc/PID/status.
int proc_threads(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("Threads:", 0) == 0) return std::stoi(line.substr(8));
  }
  return -1;
}

// kvsim with `extra` arguments, signalled as a driver does (it reads the start event for the
// pid and signals at once): the start event's thread count and /proc's, then SIGUSR1 (the
// truth must be written) and SIGTERM (a clean end), whichever thread the kernel hands them to.
void expect_threads_and_signals(const std::vector<std::string>& extra, int threads) {
  const fs::path dir = temp_dir("kvsim_threads");
  const fs::path truth = dir / "truth.json";
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  std::vector<std::string> args = {
      "kvsim",       "--trace",    (kFixtures / "mini_mooncake.jsonl").string(),
      "--kv-budget", "16MiB",      "--capacity-tokens",
      "131072",      "--duration", "20",
      "--step-ms",   "5",          "--loop",
      "--stats",     "/dev/null",  "--truth",
      truth.string()};
  args.insert(args.end(), extra.begin(), extra.end());
  std::vector<char*> argv;
  argv.reserve(args.size() + 1);
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    dup2(fds[1], STDOUT_FILENO);
    close(fds[0]);
    close(fds[1]);
    execv(KVTIER_KVSIM_BIN, argv.data());
    _exit(127);
  }
  close(fds[1]);
  FILE* out = fdopen(fds[0], "r");
  ASSERT_NE(out, nullptr);
  char line[8192];
  ASSERT_NE(fgets(line, sizeof line, out), nullptr);
  const json start = json::parse(line, nullptr, false);
  ASSERT_EQ(start["event"], "start") << line;
  EXPECT_EQ(start["threads"], threads);
  EXPECT_EQ(proc_threads(pid), threads);
  ASSERT_EQ(kill(pid, SIGUSR1), 0);
  // The next line must be the truth event: the signal neither killed it nor got lost.
  ASSERT_NE(fgets(line, sizeof line, out), nullptr);
  EXPECT_EQ(json::parse(line, nullptr, false)["event"], "truth") << line;
  {
    std::ifstream in(truth);
    const json j = json::parse(in, nullptr, false);
    ASSERT_FALSE(j.is_discarded());
    EXPECT_EQ(j["pid"], pid);
    EXPECT_EQ(j["blocks"].size(), start["sim"]["blocks"].get<std::size_t>());
  }
  // SIGTERM ends the run cleanly, still with status 0, after a last truth and the end event.
  ASSERT_EQ(kill(pid, SIGTERM), 0);
  std::string rest;
  while (fgets(line, sizeof line, out) != nullptr) rest += line;
  fclose(out);
  int st = 0;
  ASSERT_EQ(waitpid(pid, &st, 0), pid);
  EXPECT_TRUE(WIFEXITED(st));
  EXPECT_EQ(WEXITSTATUS(st), 0);
  EXPECT_THAT(rest, ::testing::HasSubstr(R"("result":"ok")"));
  fs::remove_all(dir);
}

TEST(KvsimRun, Sigusr1RightAfterStartWritesTheTruth) {
  // One thread by default.
  expect_threads_and_signals({}, 1);
}

TEST(KvsimRun, IdleThreadsAreThreadsOfTheProcessAndSignalsStillWork) {
  expect_threads_and_signals({"--idle-threads", "3"}, 4);
}

TEST(KvsimRun, IdleThreadsOutOfRangeIsABadUsage) {
  EXPECT_EQ(
      run_kvsim("--trace " + (kFixtures / "mini_mooncake.jsonl").string() + " --idle-threads 5000")
          .status,
      2);
}

class KvsimRealTraces : public ::testing::TestWithParam<const char*> {};

TEST_P(KvsimRealTraces, ShortRunIsClean) {
  const fs::path trace = kTraces / GetParam();
  ASSERT_TRUE(fs::is_regular_file(trace))
      << trace.string() << " is missing: the repository ships its traces in bench/traces";
  // The trace at 20x speed for 3 s: about a minute of it.
  const RunResult r =
      run_kvsim("--trace " + trace.string() + " --kv-budget 64MiB --time-scale 0.05 --duration 3");
  expect_clean_run(r);
  EXPECT_GT((*r.last("end"))["admitted"].get<int>(), 10);
}

TEST(KvsimRun, WithoutTraceItPlaysTheShippedMooncakeTrace) {
  const RunResult r = run_kvsim("--kv-budget 64MiB --time-scale 0.05 --duration 2");
  expect_clean_run(r);
  const json& trace = (*r.last("start"))["trace"];
  EXPECT_EQ(fs::path(trace["path"].get<std::string>()), kTraces / "mooncake_synthetic_trace.jsonl");
  EXPECT_EQ(trace["format"], "mooncake");
  EXPECT_EQ(trace["requests"], 3993);  // the rows of bench/traces/README.md
}

INSTANTIATE_TEST_SUITE_P(Shipped, KvsimRealTraces,
                         ::testing::Values("mooncake_synthetic_trace.jsonl",
                                           "azure_llm_conv_2023.csv", "azure_llm_code_2023.csv"));

}  // namespace
