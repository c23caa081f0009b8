#include "policy/cold_age_tuner.hpp"

#include <algorithm>

#include "policy/types.hpp"

namespace kvtier::policy {
namespace {

// Fewer demoted bytes than this in a window say nothing about the cold age.
constexpr std::uint64_t kMinEvidence = 1ULL << 20;

}  // namespace

ColdAgeTuner::ColdAgeTuner(TimeNs floor, TimeNs max, double target)
    : floor_(floor), max_(std::max(max, floor)), target_(target), effective_(floor) {}

TimeNs ColdAgeTuner::window() const {
  // A demotion is judged within cold_age (the floor) of it; a few effective cold
  // ages let the demotions that the last change allowed happen and be judged.
  return std::max<TimeNs>(60'000'000'000ULL, 4 * effective_);
}

double ColdAgeTuner::ratio() const {
  return demoted_ == 0 ? 0.0 : static_cast<double>(misdemoted_) / static_cast<double>(demoted_);
}

void ColdAgeTuner::record(TimeNs now, std::uint64_t demoted, std::uint64_t misdemoted) {
  samples_.push_back(Sample{.time = now, .demoted = demoted, .misdemoted = misdemoted});
  demoted_ += demoted;
  misdemoted_ += misdemoted;
  const TimeNs win = window();
  while (!samples_.empty() && samples_.front().time + win < now) {
    demoted_ -= samples_.front().demoted;
    misdemoted_ -= samples_.front().misdemoted;
    samples_.pop_front();
  }
  if (last_change_ == 0) last_change_ = now;
  if (now < last_change_ + win / 2) return;
  if (demoted_ >= kMinEvidence && ratio() > target_) {
    effective_ = std::min(max_, effective_ + effective_ / 2);
    last_change_ = now;
  } else if (ratio() < target_ / 4 && effective_ > floor_) {
    effective_ = std::max(floor_, effective_ - effective_ / 3);
    last_change_ = now;
  }
}

}  // namespace kvtier::policy
