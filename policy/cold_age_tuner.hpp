#pragma once
// The feedback that keeps a group's cold age honest: kvtier demotes what has been
// idle for the effective cold age; a demoted page accessed again within cold_age
// of its demotion was a mis-demotion (the heat table counts them). When more than
// misdemotion_target of the bytes demoted lately come back that way, the effective
// cold age grows by half; when fewer than a quarter of the target do, it shrinks
// by a third, never below the configured cold_age (the floor) nor above
// cold_age_max. Between changes the loop waits long enough to see what the last
// change did. Pure: the caller passes the time and the counts.

#include <cstdint>
#include <deque>

#include "policy/types.hpp"

namespace kvtier::policy {

class ColdAgeTuner {
 public:
  ColdAgeTuner(TimeNs floor, TimeNs max, double target);

  // What one step saw: bytes kvtier demoted, and bytes found mis-demoted.
  void record(TimeNs now, std::uint64_t demoted, std::uint64_t misdemoted);

  [[nodiscard]] TimeNs effective() const { return effective_; }
  // Mis-demoted over demoted bytes in the current window (0 when nothing was demoted).
  [[nodiscard]] double ratio() const;
  [[nodiscard]] std::uint64_t window_demoted() const { return demoted_; }
  [[nodiscard]] std::uint64_t window_misdemoted() const { return misdemoted_; }
  // How long the window is now: long enough for a demotion to be judged.
  [[nodiscard]] TimeNs window() const;

 private:
  struct Sample {
    TimeNs time = 0;
    std::uint64_t demoted = 0;
    std::uint64_t misdemoted = 0;
  };

  TimeNs floor_;
  TimeNs max_;
  double target_;
  TimeNs effective_;
  TimeNs last_change_ = 0;
  std::deque<Sample> samples_;
  std::uint64_t demoted_ = 0;
  std::uint64_t misdemoted_ = 0;
};

}  // namespace kvtier::policy
