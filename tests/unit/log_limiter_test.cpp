// Messages any socket client can trigger are rate-limited, with one "and N
// more" line per window (issue 13: 20,000 refused connections logged 20,000
// lines in 0.6 s).

#include "agent/daemon/log_limiter.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace kvtier::agent {
namespace {

constexpr TimeNs kSec = 1'000'000'000ULL;

struct Recorder {
  std::vector<std::string> lines;
  LogLimiter::Sink sink() {
    return [this](spdlog::level::level_enum, const std::string& l) { lines.push_back(l); };
  }
};

TEST(LogLimiter, BurstThenOneSummaryPerWindow) {
  Recorder r;
  LogLimiter log({.burst = 3, .window = 10 * kSec}, r.sink());
  for (int i = 0; i < 20000; ++i) {
    log.log(spdlog::level::warn, "rejected", "rejected " + std::to_string(i), kSec + i);
  }
  ASSERT_EQ(r.lines.size(), 3U);
  EXPECT_EQ(r.lines[2], "rejected 2");
  log.flush(5 * kSec);  // the window is not over yet
  EXPECT_EQ(r.lines.size(), 3U);
  log.flush(11 * kSec + 1);
  ASSERT_EQ(r.lines.size(), 4U);
  EXPECT_EQ(r.lines[3], "rejected: and 19997 more not logged in the last 10s");
  EXPECT_EQ(log.suppressed_total(), 19997U);
  // A new window logs again; a quiet window ends without a summary.
  log.log(spdlog::level::warn, "rejected", "again", 12 * kSec);
  log.flush(30 * kSec);
  ASSERT_EQ(r.lines.size(), 5U);
  EXPECT_EQ(r.lines[4], "again");
}

TEST(LogLimiter, KindsAreCountedApart) {
  Recorder r;
  LogLimiter log({.burst = 1, .window = kSec}, r.sink());
  log.log(spdlog::level::warn, "a", "a1", 0);
  log.log(spdlog::level::warn, "a", "a2", 1);
  log.log(spdlog::level::warn, "b", "b1", 2);
  log.log(spdlog::level::warn, "b", "b2", 3);
  log.log(spdlog::level::warn, "b", "b3", 4);
  log.flush(2 * kSec);
  EXPECT_EQ(r.lines,
            (std::vector<std::string>{"a1", "b1", "a: and 1 more not logged in the last 1s",
                                      "b: and 2 more not logged in the last 1s"}));
}

}  // namespace
}  // namespace kvtier::agent
