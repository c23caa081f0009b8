#pragma once
// The migration budget: a token bucket in bytes, refilled at limits.migrate_rate
// up to limits.migrate_burst. Pure: the caller passes the time in.

#include <algorithm>
#include <cstdint>

#include "policy/types.hpp"

namespace kvtier::policy {

class TokenBucket {
 public:
  TokenBucket(std::uint64_t rate_bytes_per_sec, std::uint64_t burst_bytes, TimeNs now)
      : rate_(rate_bytes_per_sec), burst_(burst_bytes), tokens_(burst_bytes), last_(now) {}

  void refill(TimeNs now) {
    if (now <= last_) return;
    const long double added = static_cast<long double>(now - last_) * rate_ / 1e9L;
    tokens_ = std::min<long double>(burst_, tokens_ + added);
    last_ = now;
  }
  // A new rate and depth (a reload): the level earned so far at the old rate
  // is kept, clamped to the new depth; a reload grants no burst.
  void reconfigure(std::uint64_t rate_bytes_per_sec, std::uint64_t burst_bytes, TimeNs now) {
    refill(now);
    rate_ = rate_bytes_per_sec;
    burst_ = burst_bytes;
    tokens_ = std::min<long double>(burst_, tokens_);
  }
  [[nodiscard]] std::uint64_t available() const { return static_cast<std::uint64_t>(tokens_); }
  // What was actually moved (or attempted): never more than is available.
  void consume(std::uint64_t bytes) {
    tokens_ = std::max<long double>(0, tokens_ - static_cast<long double>(bytes));
  }

 private:
  std::uint64_t rate_;
  std::uint64_t burst_;
  long double tokens_;
  TimeNs last_;
};

}  // namespace kvtier::policy
