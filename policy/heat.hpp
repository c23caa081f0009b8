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
// Two layouts: kPage keeps 16 bytes per tracked page in dense 2 MiB chunks
// (a chunk flagged huge moves as one unit); kRegion keeps one entry per region
// (split on reports, merged again by compact()), like DAMON.

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
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
  std::uint16_t flags = 0;        // kTracked

  static constexpr std::uint16_t kTracked = 1;
  [[nodiscard]] bool tracked() const { return (flags & kTracked) != 0; }
};
static_assert(sizeof(HeatState) == 16, "the heat model promises 16 bytes per tracked page");

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
};

// One movable unit as the planner sees it: a page, a huge page, or a region.
struct HeatUnit {
  AddrRange range;
  float heat = 0.0F;  // decayed to `now`
  std::uint32_t last_access = 0;
  std::uint32_t last_moved = 0;
  int node = -1;
  bool huge = false;
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
  // A move happened: new node, and the range may not move again for min_residence.
  void mark_moved(AddrRange range, int node, TimeNs now);
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

 private:
  struct Chunk {
    bool huge = false;
    std::unique_ptr<HeatState[]> pages;  // kPagesPerChunk entries
  };
  struct Region {
    std::uint64_t end = 0;
    HeatState state;
  };

  void add_events(HeatState& s, double events, std::uint32_t tick) const;
  Chunk& chunk_for(std::uint64_t addr);
  // kRegion: makes region boundaries at a and b (splitting), tracking gaps in [a, b).
  void split_regions(std::uint64_t a, std::uint64_t b, std::uint32_t tick, bool fill_gaps);
  template <class F>
  void for_each_page(AddrRange range, F&& f);
  template <class F>
  void for_each_region(AddrRange range, F&& f);

  HeatParams params_;
  Decay decay_;
  std::map<std::uint64_t, Chunk> chunks_;    // kPage: by 2 MiB-aligned base
  std::map<std::uint64_t, Region> regions_;  // kRegion: by start
};

template <class F>
void HeatTable::for_each_unit(TimeNs now, F&& visit) const {
  const std::uint32_t tick = to_tick(now);
  for (const auto& [base, chunk] : chunks_) {
    const HeatState* pages = chunk.pages.get();
    if (chunk.huge) {
      HeatUnit u{.range = {base, base + kHugePageSize}, .huge = true};
      bool any = false;
      for (std::uint64_t i = 0; i < kPagesPerChunk; ++i) {
        const HeatState& s = pages[i];
        if (!s.tracked()) continue;
        const float h = decay_.heat_at(s, tick);
        if (!any || h > u.heat) u.heat = h;
        if (!any || s.last_access > u.last_access) u.last_access = s.last_access;
        if (!any || s.last_moved > u.last_moved) u.last_moved = s.last_moved;
        // Pages of one huge page share a node; a disagreement means unknown.
        u.node = !any || u.node == s.node ? s.node : -1;
        any = true;
      }
      if (any) visit(u);
      continue;
    }
    for (std::uint64_t i = 0; i < kPagesPerChunk; ++i) {
      const HeatState& s = pages[i];
      if (!s.tracked()) continue;
      const std::uint64_t a = base + i * kPageSize;
      visit(HeatUnit{.range = {a, a + kPageSize},
                     .heat = decay_.heat_at(s, tick),
                     .last_access = s.last_access,
                     .last_moved = s.last_moved,
                     .node = s.node});
    }
  }
  for (const auto& [start, r] : regions_) {
    visit(HeatUnit{.range = {start, r.end},
                   .heat = decay_.heat_at(r.state, tick),
                   .last_access = r.state.last_access,
                   .last_moved = r.state.last_moved,
                   .node = r.state.node});
  }
}

}  // namespace kvtier::policy
