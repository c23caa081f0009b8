// The oracle's pieces: kvsim's live truth file (written by one process, read by another) and
// the oracle's decision (oracle_plan), with exact expectations for scripted blocks.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "bench/kvsim/ground_truth.hpp"
#include "bench/kvsim/live_truth.hpp"
#include "bench/oracle/oracle_plan.hpp"

namespace kvtier::bench {
namespace {

namespace fs = std::filesystem;
constexpr TimeNs kSec = 1'000'000'000ULL;
constexpr std::uint64_t kPage = 4096;

fs::path temp_file(const std::string& name) {
  return fs::temp_directory_path() / (name + "_" + std::to_string(getpid()));
}

LiveTruthHeader header(std::uint32_t blocks) {
  return LiveTruthHeader{.pid = 42,
                         .pool_start = 0x10000000,
                         .pool_end = 0x10000000 + std::uint64_t{blocks} * 2 * 32768,
                         .blocks = blocks,
                         .tensors = 2,
                         .chunk_bytes = 32768,
                         .tensor_bytes = std::uint64_t{blocks} * 32768,
                         .created_ns = 7 * kSec};
}

TEST(LiveTruth, AReaderSeesTheHeaderAndEveryTouchOfTheMirroredTruth) {
  const fs::path p = temp_file("live_truth");
  auto w = LiveTruthWriter::create(p, header(3));
  ASSERT_TRUE(w) << w.error().message;
  GroundTruth truth(3, 7 * kSec, 10 * kSec);
  truth.mirror_to(w->last_access());

  auto r = LiveTruthReader::open(p);
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->header().pid, 42);
  EXPECT_EQ(r->header().blocks, 3U);
  EXPECT_EQ(r->header().pool_start, 0x10000000U);
  std::vector<TimeNs> t;
  r->read(t);
  EXPECT_EQ(t, (std::vector<TimeNs>{7 * kSec, 7 * kSec, 7 * kSec}));

  truth.touch(1, 9 * kSec, false);
  truth.touch(2, 11 * kSec, true);
  r->read(t);
  EXPECT_EQ(t, (std::vector<TimeNs>{7 * kSec, 9 * kSec, 11 * kSec}));
  fs::remove(p);
}

TEST(LiveTruth, ARecreatedFileIsANewFileNotAnOldReadersMapping) {
  const fs::path p = temp_file("live_truth_again");
  auto w1 = LiveTruthWriter::create(p, header(2));
  ASSERT_TRUE(w1);
  auto r1 = LiveTruthReader::open(p);
  ASSERT_TRUE(r1);
  auto w2 = LiveTruthWriter::create(p, header(4));
  ASSERT_TRUE(w2);
  w2->last_access()[3] = 99;
  std::vector<TimeNs> t;
  r1->read(t);  // still the first file, untouched by the second writer
  EXPECT_EQ(t.size(), 2U);
  auto r2 = LiveTruthReader::open(p);
  ASSERT_TRUE(r2);
  r2->read(t);
  ASSERT_EQ(t.size(), 4U);
  EXPECT_EQ(t[3], 99U);
  fs::remove(p);
}

TEST(LiveTruth, BadFilesAreOneLineErrorsNamingTheFile) {
  const fs::path missing = temp_file("live_truth_missing");
  auto r = LiveTruthReader::open(missing);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ENOENT);
  EXPECT_NE(r.error().message.find(missing.string()), std::string::npos);

  const fs::path junk = temp_file("live_truth_junk");
  {
    std::ofstream f(junk);
    f << std::string(200, 'x');
  }
  r = LiveTruthReader::open(junk);
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("not ready"), std::string::npos) << r.error().message;

  const fs::path short_file = temp_file("live_truth_short");
  {
    std::ofstream f(short_file);
    f << "KVSIM";
  }
  r = LiveTruthReader::open(short_file);
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("too short"), std::string::npos) << r.error().message;
  fs::remove(junk);
  fs::remove(short_file);
}

// Blocks of 4 pages; times relative to now = 100 s, cold age 10 s.
constexpr TimeNs kNow = 100 * kSec;
constexpr TimeNs kAge = 10 * kSec;

OracleBlock hot_on_slow(TimeNs ago, std::uint32_t slow = 4) {
  return OracleBlock{.last_access = kNow - ago, .pages_fast = 4 - slow, .pages_slow = slow};
}
OracleBlock cold_on_fast(TimeNs ago, std::uint32_t fast = 4) {
  return OracleBlock{.last_access = kNow - ago, .pages_fast = fast, .pages_slow = 4 - fast};
}

TEST(OraclePlan, ColdIsExactlyTheColdAgeAsKvsimCountsIt) {
  EXPECT_TRUE(oracle_is_cold(kNow - kAge, kNow, kAge));
  EXPECT_FALSE(oracle_is_cold(kNow - kAge + 1, kNow, kAge));
  EXPECT_FALSE(oracle_is_cold(kNow + 5, kNow, kAge));  // touched after the oracle's clock read
}

TEST(OraclePlan, PromotesHottestFirstAndDemotesColdestFirstWithinBudgetAndRoom) {
  const std::vector<OracleBlock> blocks{
      hot_on_slow(2 * kSec),                                        // 0: hot, on slow
      cold_on_fast(20 * kSec),                                      // 1: cold, on fast
      hot_on_slow(1 * kSec, 2),                                     // 2: hotter, half on slow
      cold_on_fast(50 * kSec),                                      // 3: colder
      {.last_access = kNow - 1, .pages_fast = 4, .pages_slow = 0},  // 4: hot, in place
      {.last_access = 0, .pages_fast = 0, .pages_slow = 4},         // 5: cold, in place
  };
  // Room for everything hot, budget for everything.
  OraclePlan p = plan_oracle(blocks, OracleLimits{.now = kNow,
                                                  .cold_age_ns = kAge,
                                                  .budget_bytes = 100 * kPage,
                                                  .fast_room_bytes = 100 * kPage});
  EXPECT_EQ(p.hot_blocks, 3U);
  EXPECT_EQ(p.cold_blocks, 3U);
  EXPECT_EQ(p.misplaced_hot_bytes, 6 * kPage);
  EXPECT_EQ(p.misplaced_cold_bytes, 8 * kPage);
  ASSERT_EQ(p.moves.size(), 4U);
  // No demotion is needed for room: promotions first (hottest first), then coldest first.
  EXPECT_EQ(p.moves[0].block, 2U);
  EXPECT_TRUE(p.moves[0].to_fast);
  EXPECT_EQ(p.moves[0].bytes, 2 * kPage);
  EXPECT_EQ(p.moves[1].block, 0U);
  EXPECT_EQ(p.moves[2].block, 3U);
  EXPECT_FALSE(p.moves[2].to_fast);
  EXPECT_EQ(p.moves[3].block, 1U);
  EXPECT_EQ(p.backlog_bytes(), 0U);
  EXPECT_FALSE(p.budget_limited);
  EXPECT_FALSE(p.room_limited);
}

TEST(OraclePlan, DemotesFirstToMakeRoomForPromotions) {
  const std::vector<OracleBlock> blocks{hot_on_slow(1 * kSec), cold_on_fast(30 * kSec),
                                        cold_on_fast(20 * kSec)};
  // 4 pages to promote, 1 page of room: one demotion (the coldest) comes first.
  OraclePlan p = plan_oracle(blocks, OracleLimits{.now = kNow,
                                                  .cold_age_ns = kAge,
                                                  .budget_bytes = 100 * kPage,
                                                  .fast_room_bytes = 1 * kPage});
  ASSERT_EQ(p.moves.size(), 3U);
  EXPECT_EQ(p.moves[0].block, 1U);
  EXPECT_FALSE(p.moves[0].to_fast);
  EXPECT_EQ(p.moves[1].block, 0U);
  EXPECT_TRUE(p.moves[1].to_fast);
  EXPECT_EQ(p.moves[2].block, 2U);
  EXPECT_EQ(p.promote_bytes, 4 * kPage);
  EXPECT_EQ(p.demote_bytes, 8 * kPage);
}

TEST(OraclePlan, TheBudgetAndTheRoomStopAtTheFirstBlockThatDoesNotFit) {
  const std::vector<OracleBlock> blocks{hot_on_slow(1 * kSec), hot_on_slow(2 * kSec),
                                        cold_on_fast(30 * kSec)};
  // Budget for 6 pages: one promotion (4), then the demotion (4) does not fit.
  OraclePlan p = plan_oracle(blocks, OracleLimits{.now = kNow,
                                                  .cold_age_ns = kAge,
                                                  .budget_bytes = 6 * kPage,
                                                  .fast_room_bytes = 100 * kPage});
  ASSERT_EQ(p.moves.size(), 1U);
  EXPECT_EQ(p.moves[0].block, 0U);
  EXPECT_TRUE(p.budget_limited);
  EXPECT_FALSE(p.room_limited);
  EXPECT_EQ(p.backlog_bytes(), 8 * kPage);

  // Room for 5 pages and nothing cold to demote: one promotion, then out of room.
  const std::vector<OracleBlock> hot_only{hot_on_slow(1 * kSec), hot_on_slow(2 * kSec)};
  p = plan_oracle(hot_only, OracleLimits{.now = kNow,
                                         .cold_age_ns = kAge,
                                         .budget_bytes = 100 * kPage,
                                         .fast_room_bytes = 5 * kPage});
  ASSERT_EQ(p.moves.size(), 1U);
  EXPECT_TRUE(p.room_limited);
  EXPECT_FALSE(p.budget_limited);
}

TEST(OraclePlan, EqualTimesAreOrderedByBlockSoThePlanIsDeterministic) {
  const std::vector<OracleBlock> blocks{cold_on_fast(30 * kSec), cold_on_fast(30 * kSec),
                                        cold_on_fast(30 * kSec)};
  OraclePlan p = plan_oracle(
      blocks,
      OracleLimits{
          .now = kNow, .cold_age_ns = kAge, .budget_bytes = 8 * kPage, .fast_room_bytes = 0});
  ASSERT_EQ(p.moves.size(), 2U);
  EXPECT_EQ(p.moves[0].block, 0U);
  EXPECT_EQ(p.moves[1].block, 1U);
}

// A command's exit status and its stdout and stderr together.
int run(const std::string& cmd, std::string& out) {
  FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  if (p == nullptr) return -1;
  char buf[4096];
  while (fgets(buf, sizeof buf, p) != nullptr) out += buf;
  const int st = pclose(p);
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

TEST(LiveTruthRun, KvsimsLiveFileEndsEqualToItsFinalTruth) {
  const fs::path live = temp_file("kvsim_live");
  const fs::path csv = temp_file("kvsim_truth") += ".csv";
  std::string out;
  ASSERT_EQ(run(std::string(KVTIER_KVSIM_BIN) + " --trace " + KVTIER_FIXTURES +
                    "/kvsim/mini_mooncake.jsonl --kv-budget 32MiB --capacity-tokens 262144"
                    " --duration 2 --step-ms 5 --time-scale 0.5 --no-hugepages --live-truth " +
                    live.string() + " --truth " + csv.string(),
                out),
            0)
      << out;
  EXPECT_NE(out.find(R"("pool_pages":"MADV_NOHUGEPAGE")"), std::string::npos) << out;
  auto r = LiveTruthReader::open(live);
  ASSERT_TRUE(r) << r.error().message;
  std::vector<TimeNs> t;
  r->read(t);
  std::ifstream f(csv);
  std::string line;
  std::getline(f, line);
  std::map<std::uint32_t, TimeNs> last;  // block -> last access, from the CSV
  while (std::getline(f, line)) {
    std::stringstream ss(line);
    std::vector<std::string> cols;
    for (std::string c; std::getline(ss, c, ',');) cols.push_back(c);
    ASSERT_EQ(cols.size(), 9U) << line;
    last[static_cast<std::uint32_t>(std::stoul(cols[0]))] = std::stoull(cols[5]);
  }
  ASSERT_EQ(last.size(), t.size());
  std::size_t touched = 0;
  for (const auto& [b, ns] : last) {
    EXPECT_EQ(t[b], ns) << "block " << b;
    touched += t[b] != r->header().created_ns ? 1 : 0;
  }
  EXPECT_GT(touched, 0U);
  EXPECT_GT(r->header().pid, 0);
  EXPECT_EQ(r->header().tensors * r->header().tensor_bytes,
            r->header().pool_end - r->header().pool_start);
  fs::remove(live);
  fs::remove(csv);
}

TEST(LiveTruthRun, TheOracleRefusesANodeTheHostDoesNotHave) {
  const fs::path live = temp_file("kvsim_live_oracle");
  auto w = LiveTruthWriter::create(live, header(2));
  ASSERT_TRUE(w);
  std::string out;
  EXPECT_EQ(run(std::string(KVTIER_ORACLE_BIN) + " " + live.string() + " --slow-node 77", out), 1);
  EXPECT_NE(out.find("NUMA node 77 does not exist"), std::string::npos) << out;
  out.clear();
  EXPECT_EQ(run(std::string(KVTIER_ORACLE_BIN) + " " + live.string() + " --slow-node 0", out), 1);
  EXPECT_NE(out.find("--fast-node and --slow-node are both 0"), std::string::npos) << out;
  out.clear();
  EXPECT_EQ(run(std::string(KVTIER_ORACLE_BIN) + " " + live.string() + " --rate fast", out), 1);
  EXPECT_NE(out.find("--rate"), std::string::npos) << out;
  fs::remove(live);
}

}  // namespace
}  // namespace kvtier::bench
