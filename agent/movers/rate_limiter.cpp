#include "agent/movers/rate_limiter.hpp"

#include <algorithm>
#include <cmath>

namespace kvtier::agent {

RateLimiter::RateLimiter(double rate_bytes_per_s, double burst_bytes, TimeNs now)
    : rate_(rate_bytes_per_s), burst_(burst_bytes), tokens_(burst_bytes), last_(now) {}

void RateLimiter::refill(TimeNs now) {
  if (now <= last_) return;
  const double elapsed_s = static_cast<double>(now - last_) / 1e9;
  tokens_ = std::min(burst_, tokens_ + elapsed_s * rate_);
  last_ = now;
}

TimeNs RateLimiter::reserve(std::uint64_t bytes, TimeNs now) {
  if (unlimited()) return 0;
  refill(now);
  tokens_ -= static_cast<double>(bytes);
  if (tokens_ >= 0.0) return 0;
  return static_cast<TimeNs>(std::ceil(-tokens_ / rate_ * 1e9));
}

}  // namespace kvtier::agent
