#pragma once
// The state of one page or one region in the heat model (policy/heat.hpp), and
// PagePack, the states of a 2 MiB chunk's pages once evidence told them apart,
// packed.

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "policy/types.hpp"

namespace kvtier::policy {

// Time inside the heat model: 100 ms ticks of CLOCK_MONOTONIC (13 years in 32 bits).
inline constexpr TimeNs kTickNs = 100'000'000;
inline std::uint32_t to_tick(TimeNs t) {
  return static_cast<std::uint32_t>(t / kTickNs);
}
inline TimeNs from_tick(std::uint32_t t) {
  return static_cast<TimeNs>(t) * kTickNs;
}

inline constexpr std::uint64_t kPagesPerChunk = kHugePageSize / kPageSize;

// The state of one page or one region. Heat is as of `last_access` and decays
// lazily from there.
struct HeatState {
  float heat = 0.0F;              // accesses/s per 4 KiB page, at last_access
  std::uint32_t last_access = 0;  // tick of the last access (or of first tracking)
  std::uint32_t last_moved = 0;   // tick of the last move; 0: never moved
  std::int16_t node = -1;         // NUMA node; -1: unknown
  std::uint16_t flags = 0;        // kTracked, kDemoted, kTouched, strikes, kUsed, kAhead

  static constexpr std::uint16_t kTracked = 1;
  // The last move was a demotion by kvtier (mark_moved with demotion = true).
  static constexpr std::uint16_t kDemoted = 2;
  // A point sample (page-level evidence: a fault, a PMU sample) came since the last move.
  static constexpr std::uint16_t kTouched = 4;
  // Mis-demotions in a row (0-7): demotions followed by an access within the
  // mis-demotion window. Each one doubles how long the page is protected.
  static constexpr unsigned kStrikeShift = 3;
  static constexpr std::uint16_t kStrikeMask = 7U << kStrikeShift;
  static constexpr unsigned kMaxStrikes = 7;
  // Page-level evidence of an access came at some time since it was tracked:
  // the page holds data. Never set: as it was when tracked (allocated, maybe
  // cleared, never used since: the unfilled part of a buffer).
  static constexpr std::uint16_t kUsed = 1U << 6;
  // Never used, and just past a page accessed lately (HeatParams::frontier_bytes):
  // the next to be filled. Cleared when kvtier moves it.
  static constexpr std::uint16_t kAhead = 1U << 7;
  // Touched once since kvtier demoted it (kReturnedSoon: within the mis-demotion
  // window): one touch is weak evidence (a copy read once, a read a little past
  // the data), so the return is judged at the next touch, after a promotion
  // too: a mis-demotion or a reactivation then, neither if none comes before the
  // next demotion.
  static constexpr std::uint16_t kReturned = 1U << 8;
  static constexpr std::uint16_t kReturnedSoon = 1U << 9;
  [[nodiscard]] bool tracked() const { return (flags & kTracked) != 0; }
  [[nodiscard]] unsigned strikes() const { return (flags & kStrikeMask) >> kStrikeShift; }
  bool operator==(const HeatState&) const = default;
  void set_strikes(unsigned n) {
    flags = static_cast<std::uint16_t>((flags & ~kStrikeMask) |
                                       (std::min(n, kMaxStrikes) << kStrikeShift));
  }
};
static_assert(sizeof(HeatState) == 16,
              "a chunk of alike pages, a region and PagePack's bit-for-bit compare assume 16 "
              "bytes with no padding");

// The 512 states of a chunk whose pages evidence told apart, exactly as
// HeatState has them, in about 7 bytes a page instead of 16 (issue 33: at most
// one byte of kvtierd's memory per tracked page at 1 TiB):
//   - heat: a float a page;
//   - last_access: 2 bytes a page, ticks after the chunk's earliest; a chunk
//     whose pages' last accesses span more than 65535 ticks (1.8 hours) keeps
//     4 bytes a page instead;
//   - last_moved, node and flags, which a chunk's pages share but for a few
//     moves and samples: a list of the distinct ones, and a byte a page saying
//     which (2 bytes when more than 256 are distinct).
// get() gives back what set() was given, bit for bit.
class PagePack {
 public:
  static constexpr std::size_t kPages = kPagesPerChunk;

  // Every page `all`.
  explicit PagePack(const HeatState& all);
  [[nodiscard]] HeatState get(std::size_t i) const {
    const Rest& r = rests_[index(i)];
    return HeatState{.heat = heat_[i],
                     .last_access = access(i),
                     .last_moved = r.last_moved,
                     .node = r.node,
                     .flags = r.flags};
  }
  // f(i, state) for every page in order, the layout's choice made once.
  template <class F>
  __attribute__((always_inline)) void for_each(F&& f) const {
    if (!wide_access_ && !wide_index_) {
      for (std::size_t i = 0; i < kPages; ++i) {
        const Rest& r = rests_[index_[i]];
        f(i, HeatState{.heat = heat_[i],
                       .last_access = base_ + access_[i],
                       .last_moved = r.last_moved,
                       .node = r.node,
                       .flags = r.flags});
      }
      return;
    }
    for (std::size_t i = 0; i < kPages; ++i) f(i, get(i));
  }
  void set(std::size_t i, const HeatState& s);
  // Pages tracked, and of them those on a known node (node >= 0).
  [[nodiscard]] std::size_t tracked_pages() const { return tracked_; }
  [[nodiscard]] std::size_t located_pages() const { return located_; }
  // The earliest and the latest last access of the 512 pages (tracked or not).
  // The earliest is the parts' (no walk); the latest is a walk.
  [[nodiscard]] std::uint32_t earliest_access() const;
  [[nodiscard]] std::uint32_t latest_access() const;
  // Bounds kept as pages change, for walks that skip a chunk that cannot matter
  // to them (the planner's scan: GroupRules::yields_none): no page's last access
  // is later than latest_bound(), no page's heat (as of its last access) above
  // heat_bound(). They only grow: a page's access or heat set lower leaves them.
  [[nodiscard]] std::uint32_t latest_bound() const { return latest_bound_; }
  [[nodiscard]] float heat_bound() const { return heat_bound_; }
  // The flags of every page (tracked or not) or'ed together (a few distinct ones: no walk).
  [[nodiscard]] std::uint16_t flags_any() const;
  // Counts the set() calls: a walk's result for this pack holds while it is unchanged
  // (the heatmap row's per-chunk sums: agent/loop/views.cpp).
  [[nodiscard]] std::uint64_t version() const { return version_; }
  // The pages that share a last move, node and flags (a chunk has a few such
  // parts), with bounds kept as pages change (no walk): the earliest last access
  // of the part's pages (exact), and bounds no page's later access or heat is above.
  struct Part {
    std::int16_t node = -1;
    std::uint16_t flags = 0;
    std::uint16_t pages = 0;
    std::uint32_t earliest_access = 0;
    std::uint32_t latest_bound = 0;
    float heat_bound = 0.0F;
  };
  // f(part) for each part with pages.
  template <class F>
  void for_each_part(F&& f) const {
    for (std::size_t r = 0; r < rests_.size(); ++r) {
      const Share& sh = shares_[r];
      if (sh.pages == 0) continue;
      f(Part{.node = rests_[r].node,
             .flags = rests_[r].flags,
             .pages = sh.pages,
             .earliest_access = sh.earliest,
             .latest_bound = sh.latest_bound,
             .heat_bound = sh.heat_bound});
    }
  }
  // The node every page has (tracked or not), or -2 if they may differ.
  [[nodiscard]] int one_node() const;
  // Every page in the same state.
  [[nodiscard]] bool alike() const;
  // Bytes this pack holds, with its lists.
  [[nodiscard]] std::uint64_t memory_bytes() const;

 private:
  struct Rest {
    std::uint32_t last_moved = 0;
    std::int16_t node = -1;
    std::uint16_t flags = 0;
    bool operator==(const Rest&) const = default;
  };
  // The bounds of the pages that have one rest (its Part), index for index with rests_.
  struct Share {
    std::uint32_t earliest = 0;
    std::uint32_t latest_bound = 0;
    float heat_bound = 0.0F;
    std::uint16_t at_earliest = 0;  // pages at `earliest`
    std::uint16_t pages = 0;
  };
  // Page i (in its old state) leaves its rest's share.
  void leave_share(std::size_t i);
  [[nodiscard]] std::uint32_t access(std::size_t i) const {
    return wide_access_ ? wide_access_[i] : base_ + access_[i];
  }
  [[nodiscard]] std::uint16_t index(std::size_t i) const {
    return wide_index_ ? wide_index_[i] : index_[i];
  }
  void set_access(std::size_t i, std::uint32_t tick);
  // The index of `r` in rests_, added if new (for page `i`, whose old one may go).
  std::uint16_t rest_index(std::size_t i, const Rest& r);
  // Drops the rests no page uses, keeping the order of the others.
  void drop_unused_rests();

  std::array<float, kPages> heat_{};
  std::array<std::uint16_t, kPages> access_{};  // last_access - base_ (while not wide)
  std::array<std::uint8_t, kPages> index_{};    // into rests_ (while not wide)
  std::uint64_t version_ = 0;
  std::uint32_t base_ = 0;
  std::uint32_t latest_bound_ = 0;  // >= every last access
  float heat_bound_ = 0.0F;         // >= every heat
  std::uint16_t tracked_ = 0;
  std::uint16_t located_ = 0;
  std::unique_ptr<std::uint32_t[]> wide_access_;  // last_access, once a span is too wide
  std::unique_ptr<std::uint16_t[]> wide_index_;   // once more than 256 rests are in use
  std::vector<Rest> rests_;
  std::vector<Share> shares_;  // one per rest
};

}  // namespace kvtier::policy
