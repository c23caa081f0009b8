// The loop's parts alone, without a Controller: the dispatcher's pieces and the
// groups' feedback (agent/loop/dispatcher.hpp, feedback.hpp).

#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "agent/host/host_paths.hpp"
#include "agent/loop/dispatcher.hpp"
#include "agent/loop/feedback.hpp"
#include "agent/loop/loop_state.hpp"
#include "agent/loop/shared_pools.hpp"
#include "agent/loop/target_set.hpp"
#include "agent/telemetry/telemetry.hpp"
#include "policy/config.hpp"
#include "policy/types.hpp"

namespace kvtier::agent {
namespace {

constexpr std::uint64_t kMiB = 1ULL << 20;
constexpr TimeNs kSec = 1'000'000'000;

TEST(LoopParts, InPiecesCutsAtPieceMultiplesAndPacksWhatFits) {
  const std::vector<AddrRange> ranges{{0, 3 * kMiB}, {8 * kMiB, 9 * kMiB}, {10 * kMiB, 15 * kMiB}};
  const auto pieces = in_pieces(ranges, 4 * kMiB);
  // 3 MiB + 1 MiB fit one piece; 10-15 MiB is cut at 12 MiB.
  ASSERT_EQ(pieces.size(), 3U);
  EXPECT_EQ(pieces[0], (std::vector<AddrRange>{{0, 3 * kMiB}, {8 * kMiB, 9 * kMiB}}));
  EXPECT_EQ(pieces[1], (std::vector<AddrRange>{{10 * kMiB, 12 * kMiB}}));
  EXPECT_EQ(pieces[2], (std::vector<AddrRange>{{12 * kMiB, 15 * kMiB}}));
}

TEST(LoopParts, FeedbackCountsMovesAndEndsTheWaitOfPromotedPages) {
  auto cc = policy::compile_config_text(
      "[[group]]\nname = \"g\"\n[group.select]\ncomm = [\"^x\"]\n[group.policy]\n"
      "cold_age = \"10s\"\n",
      "test.toml");
  ASSERT_TRUE(cc);
  LoopState s(std::move(*cc), TargetSet(HostPaths{}, 1, std::make_shared<SharedPools>()));
  Feedback fb(s);
  fb.reset();
  ASSERT_EQ(s.feedback.size(), 1U);
  Telemetry telemetry;
  Target t;
  t.first_slow_touch[0x1000] = 5 * kSec;
  t.first_slow_touch[0x9000] = 5 * kSec;
  const std::vector<AddrRange> promoted{{0x1000, 0x2000}};
  fb.moved(t, promoted, false, 4096, 7 * kSec, telemetry);
  fb.moved(t, promoted, true, 8192, 7 * kSec, telemetry);
  EXPECT_EQ(s.feedback[0].promoted_bytes, 4096U);
  EXPECT_EQ(s.feedback[0].demoted_bytes, 8192U);
  EXPECT_EQ(s.feedback[0].step_demoted, 8192U);
  // The promoted page's wait ended (2 s, kvtier's); the other still waits.
  EXPECT_EQ(t.first_slow_touch.size(), 1U);
  EXPECT_EQ(telemetry.value("kvtier_promotion_latency_seconds", {{"by", "kvtier"}}), 1.0);
  fb.end_step(8 * kSec, telemetry);
  EXPECT_EQ(s.feedback[0].step_demoted, 0U);
  EXPECT_EQ(telemetry.value("kvtier_demoted_bytes_total", {{"group", "g"}}), 8192.0);
}

}  // namespace
}  // namespace kvtier::agent
