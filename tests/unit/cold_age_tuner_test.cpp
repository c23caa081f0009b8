// The mis-demotion feedback (policy/cold_age_tuner.hpp): when it raises and
// lowers the effective cold age, and its bounds.

#include "policy/cold_age_tuner.hpp"

#include <gtest/gtest.h>

namespace kvtier::policy {
namespace {

constexpr TimeNs kSec = 1'000'000'000;
constexpr std::uint64_t kMiB = 1ULL << 20;

TEST(ColdAgeTuner, RaisesByHalfWhenTooMuchComesBackAndWaitsBetweenChanges) {
  ColdAgeTuner t(10 * kSec, 40 * kSec, 0.05);
  EXPECT_EQ(t.effective(), 10 * kSec);
  EXPECT_EQ(t.window(), 60 * kSec);
  // 10% of 4 MiB mis-demoted, every 5 s.
  for (TimeNs now = 5 * kSec; now <= 25 * kSec; now += 5 * kSec) {
    t.record(now, 4 * kMiB, 4 * kMiB / 10);
  }
  EXPECT_EQ(t.effective(), 10 * kSec) << "half a window since the first sample: not yet";
  t.record(35 * kSec, 4 * kMiB, 4 * kMiB / 10);
  EXPECT_EQ(t.effective(), 15 * kSec);
  EXPECT_NEAR(t.ratio(), 0.1, 1e-6);  // 4 MiB / 10 rounds down
  t.record(40 * kSec, 4 * kMiB, 4 * kMiB / 10);
  EXPECT_EQ(t.effective(), 15 * kSec) << "the last change is too recent";
  for (TimeNs now = 45 * kSec; now <= 300 * kSec; now += 5 * kSec) {
    t.record(now, 4 * kMiB, 4 * kMiB / 10);
  }
  EXPECT_EQ(t.effective(), 40 * kSec) << "never above cold_age_max";
}

TEST(ColdAgeTuner, LowersByAThirdWhenMisdemotionsStopButNeverBelowTheFloor) {
  ColdAgeTuner t(10 * kSec, 600 * kSec, 0.05);
  TimeNs now = 0;
  for (now = 5 * kSec; now <= 120 * kSec; now += 5 * kSec) t.record(now, 4 * kMiB, kMiB);
  const TimeNs raised = t.effective();
  ASSERT_GT(raised, 10 * kSec);
  for (; now <= 3000 * kSec; now += 5 * kSec) t.record(now, 4 * kMiB, 0);
  EXPECT_EQ(t.effective(), 10 * kSec);
  EXPECT_EQ(t.ratio(), 0.0);
}

TEST(ColdAgeTuner, FewDemotionsSayNothing) {
  ColdAgeTuner t(10 * kSec, 600 * kSec, 0.05);
  // Everything comes back, but only 256 KiB a window was demoted.
  for (TimeNs now = 5 * kSec; now <= 600 * kSec; now += 60 * kSec) {
    t.record(now, 256 * 1024, 256 * 1024);
  }
  EXPECT_EQ(t.effective(), 10 * kSec);
  EXPECT_DOUBLE_EQ(t.ratio(), 1.0);
}

}  // namespace
}  // namespace kvtier::policy
