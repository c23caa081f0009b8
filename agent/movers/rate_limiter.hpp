#pragma once
// The migration budget: a token bucket in bytes. Migration costs memory
// bandwidth the inference server needs, so the movers spend at most `rate`
// bytes per second on average, with at most `burst` bytes at once.

#include <cstdint>

#include "policy/types.hpp"

namespace kvtier::agent {

class RateLimiter {
 public:
  // rate_bytes_per_s == 0 means unlimited. The bucket starts full.
  RateLimiter(double rate_bytes_per_s, double burst_bytes, TimeNs now);

  // Takes `bytes` from the bucket (it may go into debt) and returns how long
  // the caller must wait before spending them so the average stays in budget.
  TimeNs reserve(std::uint64_t bytes, TimeNs now);

  [[nodiscard]] bool unlimited() const { return rate_ <= 0.0; }
  [[nodiscard]] double tokens() const { return tokens_; }

 private:
  void refill(TimeNs now);

  double rate_;
  double burst_;
  double tokens_;
  TimeNs last_;
};

}  // namespace kvtier::agent
