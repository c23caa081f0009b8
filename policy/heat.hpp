#pragma once
// The heat model: per target, per page or per region, an estimate of accesses
// per second per 4 KiB page that decays exponentially (configurable half-life),
// plus the last access, the last move and the node the memory lives on.
//
// Point samples (PMU/fault samples, each standing for `weight` accesses) and
// region reports (DAMON nr_accesses per aggregation interval, idle-page scans)
// both add "events" to the same estimator, so their heat is one comparable
// figure: h <- h * 2^(-dt/half_life) + events * ln2 / half_life, which
// converges to the access rate for a steady rate. Region sources see at most one
// access per sampling check, so their figure saturates at 1/sample_interval.
//
// Two layouts: kPage keeps 2 MiB chunks (a chunk flagged huge moves as one
// unit), each either one state for all its 512 pages (while nothing told them
// apart: a mapping tracked, located and moved as a whole, never sampled) or,
// once page-level evidence makes one page differ, 16 bytes per page; a write
// that covers a whole chunk and leaves its pages alike folds it back. kRegion
// keeps one entry per region (split on reports, merged again by compact()),
// like DAMON.

#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <utility>
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
              "the heat model promises 16 bytes per page with page-level evidence");

// 2^(-dt/half_life) for dt in ticks, from two small tables (no exp2 per page).
class Decay {
 public:
  explicit Decay(TimeNs half_life);
  [[nodiscard]] float factor(std::uint32_t dt_ticks) const {
    if (dt_ticks >= limit_) return 0.0F;
    return hi_[dt_ticks >> kLoBits] * lo_[dt_ticks & kLoMask];
  }
  [[nodiscard]] float heat_at(const HeatState& s, std::uint32_t now_tick) const {
    return now_tick <= s.last_access ? s.heat : s.heat * factor(now_tick - s.last_access);
  }
  [[nodiscard]] TimeNs half_life() const { return half_life_; }
  // Heat added by `events` accesses.
  [[nodiscard]] float per_event() const { return per_event_; }

 private:
  static constexpr unsigned kLoBits = 10;
  static constexpr std::uint32_t kLoMask = (1U << kLoBits) - 1;
  TimeNs half_life_;
  float per_event_;
  std::uint32_t limit_;  // beyond 40 half-lives (kHalfLivesToZero), heat is 0
  std::vector<float> hi_;
  std::vector<float> lo_;
};

enum class Granularity : std::uint8_t { kPage, kRegion };

struct HeatParams {
  TimeNs half_life = 10'000'000'000;
  Granularity granularity = Granularity::kPage;
  // DAMON's aggregation interval, to date a region's idle age (RegionAccess::age).
  TimeNs region_interval = 100'000'000;
  // A demoted page accessed again within this long of its demotion was mis-demoted
  // (the group's cold_age); 0: nothing is counted.
  TimeNs misdemotion_window = 0;
  // Page granularity: a region report found accessed in at least this share of
  // its checks (nr_accesses / max_nr_accesses) also counts as touching every
  // page in it, as a page-level sample would: on a slow node that is evidence to
  // promote, on a demoted page a check of the demotion. A weaker report only
  // keeps its pages warm (no demotion of what may be in use). 0: never.
  double region_touch_share = 0.0;
  // Memory that grows forward (a KV cache appending rows, an arena filling up):
  // a point sample at a page also counts as an access, at the same time, to the
  // pages never used since tracked (HeatState::kUsed) in the `frontier_bytes`
  // after it. They are what is written next: kept warm while the pages before
  // them are in use (not demoted as cold behind an active frontier), and on a
  // slow node they are promotion candidates with it (HeatUnit::ahead). Used
  // pages in that span keep their own evidence. 0: off. kPage only. kvtierd
  // leaves it off: with 128 KiB against llama-server it seldom fired (its
  // evidence, NUMA hint faults, came too seldom) and its promotions on the slow
  // node were churn (docs/llama-server.md).
  std::uint64_t frontier_bytes = 0;
};

// What the table learnt from samples about its demoted pages since the last
// take_events(): bytes accessed again within the mis-demotion window of their
// demotion (mis-demoted), and bytes accessed later (reactivated: cold when
// demoted, in use again now), each counted at the second touch since the
// demotion (HeatState::kReturned): a page touched once is neither.
struct HeatEvents {
  std::uint64_t misdemoted_bytes = 0;
  std::uint64_t reactivated_bytes = 0;
  std::uint64_t touched_demoted_pages = 0;  // point samples that hit a demoted page
  // Memory touched since its last move and then found on another node that kvtier
  // did not move it to (set_node): the kernel promoted it in the fault path.
  std::uint64_t moved_by_kernel_bytes = 0;
};

// One movable unit as the planner sees it: a page, a huge page, or a region.
struct HeatUnit {
  AddrRange range;
  float heat = 0.0F;  // decayed to `now`
  std::uint32_t last_access = 0;
  std::uint32_t last_moved = 0;
  int node = -1;
  bool huge = false;
  bool demoted = false;  // kvtier's last move of it was a demotion
  bool touched = false;  // page-level evidence of an access since the last move
  // Never used since tracked, just past a page accessed since (HeatParams::frontier_bytes).
  bool ahead = false;
  unsigned strikes = 0;  // mis-demotions in a row
};

class HeatTable {
 public:
  explicit HeatTable(HeatParams params = {});

  // Starts tracking [range) on `node` (e.g. a VMA from /proc/PID/maps): idle from `now`.
  // Already tracked pages keep their state but take the node.
  void track(AddrRange range, int node, TimeNs now);
  // Stops tracking (unmapped memory).
  void untrack(AddrRange range);
  // Point sample: `weight` accesses at the page of `addr`. Untracked pages get tracked
  // (node unknown until set_node).
  void add(const AccessSample& s);
  // Region report: every tracked page (kPage) or region (kRegion) in the range gets
  // nr_accesses events; untracked memory in the range gets tracked.
  void add(const RegionAccess& r);
  // Residency as the agent last saw it (pagemap, move_pages status).
  void set_node(AddrRange range, int node);
  // kvtier moved the range: new node, the time of the move (min_residence, the
  // mis-demotion window), and whether it was a demotion.
  void mark_moved(AddrRange range, int node, TimeNs now, bool demotion = false);
  // What samples revealed about demoted pages since the last call.
  HeatEvents take_events() { return std::exchange(events_, HeatEvents{}); }
  // Transparent huge pages (kPage): a huge chunk is planned as one 2 MiB unit.
  void set_huge(std::uint64_t addr, bool huge);
  // Every chunk is huge exactly when its base is in `blocks` (sorted), as the
  // residency reader found them. kRegion tables keep no huge pages: the mover
  // leaves alone a huge page a planned region covers only partly.
  void set_huge_blocks(std::span<const std::uint64_t> blocks);
  // kRegion: merges neighbours on the same node whose heat now differs by at most
  // `tolerance` (relative; below 0.001/s counts as 0), like DAMON's region merge,
  // so the region count stays bounded. The merged region keeps the later last
  // access and the later move, so merging never makes anything look colder.
  void compact(TimeNs now, double tolerance = 0.25);

  // The decayed state at `addr`, if tracked.
  [[nodiscard]] std::optional<HeatUnit> at(std::uint64_t addr, TimeNs now) const;
  [[nodiscard]] std::uint64_t tracked_bytes() const;
  // Bytes this table holds (entries and their containers, roughly).
  [[nodiscard]] std::uint64_t memory_bytes() const;
  [[nodiscard]] std::size_t region_count() const { return regions_.size(); }
  [[nodiscard]] const Decay& decay() const { return decay_; }
  [[nodiscard]] Granularity granularity() const { return params_.granularity; }

  // Visits every movable unit in address order: each tracked page, each huge chunk
  // as a whole (heat = hottest page, last access = latest), each region.
  template <class F>
  void for_each_unit(TimeNs now, F&& visit) const;
  // The same units as runs: visit(u, n) stands for n units of u.range.bytes()
  // each from u.range.start on, alike but for their address (a chunk of alike
  // pages is one run of 512 pages; any other unit a run of 1). A walk that
  // treats alike units alike costs one call per chunk instead of one per page.
  template <class F>
  void for_each_run(TimeNs now, F&& visit) const;

 private:
  [[nodiscard]] HeatUnit unit_of(const HeatState& s, AddrRange range, std::uint32_t tick) const {
    return HeatUnit{
        .range = range,
        .heat = decay_.heat_at(s, tick),
        .last_access = s.last_access,
        .last_moved = s.last_moved,
        .node = s.node,
        .demoted = (s.flags & HeatState::kDemoted) != 0,
        .touched = (s.flags & HeatState::kTouched) != 0,
        .ahead = (s.flags & (HeatState::kAhead | HeatState::kUsed)) == HeatState::kAhead,
        .strikes = s.strikes()};
  }
  struct Chunk {
    bool huge = false;
    // The state of every page while `pages` is null.
    HeatState same;
    std::unique_ptr<HeatState[]> pages;  // kPagesPerChunk entries, or null: all `same`
    [[nodiscard]] const HeatState& page(std::uint64_t i) const { return pages ? pages[i] : same; }
  };
  struct Region {
    std::uint64_t end = 0;
    HeatState state;
  };

  void add_events(HeatState& s, double events, std::uint32_t tick) const;
  // Page-level evidence of an access at `tick` to the `pages` pages in state `s`.
  void touch(HeatState& s, std::uint32_t tick, std::uint64_t pages);
  // A second touch since the demotion: the return was real (HeatState::kReturned).
  void judge_return(HeatState& s, std::uint64_t bytes);
  // The never-used pages in the frontier_bytes past the page at `addr`, accessed at `tick`.
  void anticipate(std::uint64_t addr, std::uint32_t tick);
  void observe_node(HeatState& s, std::int16_t n, std::uint64_t bytes);
  Chunk& chunk_for(std::uint64_t addr);
  // Gives the chunk one state per page (each `same`).
  static void spread(Chunk& c);
  // Back to one state if every page has the same.
  static void fold(Chunk& c);
  // kRegion: makes region boundaries at a and b (splitting), tracking gaps in [a, b).
  void split_regions(std::uint64_t a, std::uint64_t b, std::uint32_t tick, bool fill_gaps);
  template <class F>
  void for_each_page(AddrRange range, F&& f);
  template <class F>
  void for_each_region(AddrRange range, F&& f);

  HeatParams params_;
  Decay decay_;
  std::uint32_t misdemotion_ticks_;
  HeatEvents events_;
  std::map<std::uint64_t, Chunk> chunks_;    // kPage: by 2 MiB-aligned base
  std::map<std::uint64_t, Region> regions_;  // kRegion: by start
};

template <class F>
void HeatTable::for_each_unit(TimeNs now, F&& visit) const {
  for_each_run(
      now, [&](const HeatUnit& first, std::uint64_t n) __attribute__((always_inline)) {
        if (n == 1) {
          visit(first);
          return;
        }
        HeatUnit u = first;
        const std::uint64_t bytes = u.range.bytes();
        for (std::uint64_t i = 0; i < n; ++i) {
          visit(u);
          u.range = {u.range.end, u.range.end + bytes};
        }
      });
}

template <class F>
void HeatTable::for_each_run(TimeNs now, F&& visit) const {
  const std::uint32_t tick = to_tick(now);
  for (const auto& [base, chunk] : chunks_) {
    if (chunk.huge) {
      HeatUnit u{.range = {base, base + kHugePageSize}, .huge = true};
      bool any = false;
      for (std::uint64_t i = 0; i < kPagesPerChunk; ++i) {
        const HeatState& s = chunk.page(i);
        if (!s.tracked()) continue;
        const float h = decay_.heat_at(s, tick);
        if (!any || h > u.heat) u.heat = h;
        if (!any || s.last_access > u.last_access) u.last_access = s.last_access;
        if (!any || s.last_moved > u.last_moved) u.last_moved = s.last_moved;
        // Pages of one huge page share a node; a disagreement means unknown.
        u.node = !any || u.node == s.node ? s.node : -1;
        u.demoted = u.demoted || (s.flags & HeatState::kDemoted) != 0;
        u.touched = u.touched || (s.flags & HeatState::kTouched) != 0;
        u.ahead =
            u.ahead || (s.flags & (HeatState::kAhead | HeatState::kUsed)) == HeatState::kAhead;
        u.strikes = std::max(u.strikes, s.strikes());
        any = true;
        if (!chunk.pages) break;  // every page alike
      }
      if (any) visit(u, std::uint64_t{1});
      continue;
    }
    if (!chunk.pages) {
      if (chunk.same.tracked())
        visit(unit_of(chunk.same, {base, base + kPageSize}, tick), kPagesPerChunk);
      continue;
    }
    const HeatState* pages = chunk.pages.get();
    for (std::uint64_t i = 0; i < kPagesPerChunk; ++i) {
      const HeatState& s = pages[i];
      if (!s.tracked()) continue;
      const std::uint64_t a = base + i * kPageSize;
      visit(unit_of(s, {a, a + kPageSize}, tick), std::uint64_t{1});
    }
  }
  for (const auto& [start, r] : regions_) {
    visit(unit_of(r.state, {start, r.end}, tick), std::uint64_t{1});
  }
}

}  // namespace kvtier::policy
