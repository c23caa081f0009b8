#pragma once
// What the loop knows of a target's long-term pinned memory: ranges the kernel
// holds with FOLL_LONGTERM pins (io_uring registered buffers, RDMA
// registrations, cudaHostRegister) that move_pages(2) can never migrate. The
// planner leaves them out (TargetView::pinned), so no migration budget is spent
// on them, and `kvtierctl explain` says why.
//
// Two ways to know a range is pinned:
//   - registered: the kernel shows it (io_uring's fdinfo lists every registered
//     buffer by address and length); the list is replaced at every read and
//     trusted as it stands.
//   - refused: move_pages left every page of it unmoved on every attempt. Such
//     a range is kept out for a backoff that starts at kPinnedBackoffMin and
//     doubles (up to kPinnedBackoffMax) each time it is refused again; then it
//     is tried once more. A change of the target's mappings forgets every
//     refusal at once (the memory may have been unmapped and mapped anew).

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "policy/types.hpp"

namespace kvtier::policy {

inline constexpr TimeNs kPinnedBackoffMin = 60'000'000'000ULL;     // 1 min
inline constexpr TimeNs kPinnedBackoffMax = 3'600'000'000'000ULL;  // 1 h

// True when `r` overlaps a range of `sorted` (sorted by start, not overlapping).
bool overlaps_any(std::span<const AddrRange> sorted, AddrRange r);

// How a pinned range was found.
enum class PinSource : std::uint8_t { kRegistered, kRefused };

struct PinnedRange {
  AddrRange range;
  PinSource source = PinSource::kRefused;
  TimeNs since = 0;            // first found
  TimeNs retry_at = 0;         // refused: tried again from then on; registered: unused
  std::uint32_t refusals = 0;  // refused: how many backoffs in a row
};

class PinnedMap {
 public:
  // move_pages refused every page of these ranges at `now`.
  void refused(std::span<const AddrRange> ranges, TimeNs now);
  // The registered buffers the kernel shows now (any order), replacing the last list.
  void set_registered(std::span<const AddrRange> ranges, TimeNs now);
  // Refusals whose backoff ended stop covering their ranges (their count stays,
  // so the next refusal backs off longer).
  void expire(TimeNs now);
  // The target's mappings changed: every refusal is forgotten.
  void mapping_changed();

  // What the planner leaves out now: sorted by start, merged.
  [[nodiscard]] const std::vector<AddrRange>& active() const { return active_; }
  [[nodiscard]] bool covers(AddrRange r) const { return overlaps_any(active_, r); }
  [[nodiscard]] std::uint64_t bytes() const;
  // How the range at `addr` was found, in words ("io_uring registered buffer",
  // "move_pages refused it 2 times in a row, tried again in 4 min"); "" when
  // not pinned.
  [[nodiscard]] std::string how(std::uint64_t addr, TimeNs now) const;
  // How all of it was found, in words ("io_uring registered buffers, move_pages refusals").
  [[nodiscard]] std::string sources() const;
  [[nodiscard]] const std::vector<PinnedRange>& ranges() const { return ranges_; }

 private:
  void rebuild(TimeNs now);

  std::vector<PinnedRange> ranges_;  // sorted by start; refused ones past retry_at stay
  std::vector<AddrRange> active_;
};

}  // namespace kvtier::policy
