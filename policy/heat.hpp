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
// once page-level evidence makes one page differ, a PagePack of them (about 7
// bytes a page, exact: heat_state.hpp); a write that covers a whole chunk and
// leaves its pages alike folds it back. The chunks of consecutive 2 MiB blocks
// (a mapping) sit in one array, 32 bytes each. kRegion
// keeps one entry per region (split on reports, merged again by compact()),
// like DAMON.

#include <algorithm>
#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <utility>
#include <vector>

#include "policy/heat_state.hpp"
#include "policy/types.hpp"

namespace kvtier::policy {

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
  // Bytes tracked per node as the table has them (the node set by track, set_node and
  // mark_moved), and in `*unknown_bytes` those of no known node. kPage tables keep the
  // counts as their states change: no walk.
  [[nodiscard]] std::map<int, std::uint64_t> bytes_per_node(
      std::uint64_t* unknown_bytes = nullptr) const;
  [[nodiscard]] std::size_t region_count() const { return regions_.size(); }
  [[nodiscard]] const Decay& decay() const { return decay_; }
  [[nodiscard]] Granularity granularity() const { return params_.granularity; }

  // Visits every movable unit in address order: each tracked page, each huge chunk
  // as a whole (heat = hottest page, last access = latest), each region.
  template <class F>
  void for_each_unit(TimeNs now, F&& visit) const;
  // The same units as runs: visit(u, n) stands for n units of u.range.bytes()
  // each from u.range.start on, alike but for their address (a chunk of alike
  // pages is one run of 512 pages, and consecutive such chunks in the same state
  // one run of them all; any other unit a run of 1). A walk that treats alike
  // units alike costs one call per stretch of alike chunks instead of one per page.
  template <class F>
  void for_each_run(TimeNs now, F&& visit) const;
  // The same, but a chunk of pages with their own states (not huge) goes first to
  // pack(base, pages): if it returns true the walk takes the chunk as seen, else
  // its pages come to visit one by one. A walk that needs no page's heat (the
  // residency check's probes) may take a chunk at once.
  template <class F, class P>
  void for_each_run(TimeNs now, F&& visit, P&& pack) const;

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
    // The state of every page while `pages` is null.
    HeatState same;
    std::unique_ptr<PagePack> pages;  // or null: all `same`
    bool huge = false;
    [[nodiscard]] HeatState page(std::uint64_t i) const { return pages ? pages->get(i) : same; }
    // Not huge, its pages alike, in the same state as `c`'s, bit for bit.
    [[nodiscard]] bool alike_to(const Chunk& c) const {
      return !huge && !pages &&
             std::bit_cast<std::array<std::uint32_t, 4>>(same) ==
                 std::bit_cast<std::array<std::uint32_t, 4>>(c.same);
    }
    [[nodiscard]] bool tracked() const {
      return pages ? pages->tracked_pages() > 0 : same.tracked();
    }
  };
  // The chunks of consecutive 2 MiB blocks from a base.
  using Extent = std::vector<Chunk>;
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
  // Makes every chunk of [a, b) (2 MiB-aligned) exist, untracked if new.
  void ensure_chunks(std::uint64_t a, std::uint64_t b);
  // Drops the chunks of [a, b) with no tracked page.
  void drop_untracked(std::uint64_t a, std::uint64_t b);
  // Counts `pages` pages in state `s` in (+1) or out (-1) of the bytes per node.
  void count(const HeatState& s, std::uint64_t pages, int sign);
  // kRegion: makes region boundaries at a and b (splitting), tracking gaps in [a, b).
  void split_regions(std::uint64_t a, std::uint64_t b, std::uint32_t tick, bool fill_gaps);
  // Calls f(HeatState&, pages) for the tracked and untracked pages of the range's
  // chunks: once for a whole chunk whose pages are alike (pages = 512), else once per
  // page (pages = 1); with `create`, the range's missing chunks are made first.
  template <class F>
  void for_each_page(AddrRange range, bool create, F&& f);
  template <class F>
  void for_each_region(AddrRange range, F&& f);

  HeatParams params_;
  Decay decay_;
  std::uint32_t misdemotion_ticks_;
  HeatEvents events_;
  std::map<std::uint64_t, Extent> extents_;  // kPage: by the first chunk's base
  // kPage: tracked bytes by node + 1 (0: no known node).
  std::vector<std::uint64_t> node_bytes_;
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
  for_each_run(
      now, std::forward<F>(visit),
      [](std::uint64_t, const PagePack&) __attribute__((always_inline)) { return false; });
}

template <class F, class P>
void HeatTable::for_each_run(TimeNs now, F&& visit, P&& pack) const {
  const std::uint32_t tick = to_tick(now);
  for (const auto& [first, extent] : extents_) {
    for (std::size_t ci = 0; ci < extent.size(); ++ci) {
      const Chunk& chunk = extent[ci];
      const std::uint64_t base = first + ci * kHugePageSize;
      if (chunk.huge) {
        HeatUnit u{.range = {base, base + kHugePageSize}, .huge = true};
        bool any = false;
        for (std::uint64_t i = 0; i < kPagesPerChunk; ++i) {
          const HeatState s = chunk.page(i);
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
        if (!chunk.same.tracked()) continue;
        // The chunks after it in the same state make one run with it.
        std::size_t last = ci;
        while (last + 1 < extent.size() && extent[last + 1].alike_to(chunk)) ++last;
        visit(unit_of(chunk.same, {base, base + kPageSize}, tick),
              (last - ci + 1) * kPagesPerChunk);
        ci = last;
        continue;
      }
      if (pack(base, *chunk.pages)) continue;
      chunk.pages->for_each([&](std::size_t i, const HeatState& s) __attribute__((always_inline)) {
        if (!s.tracked()) return;
        const std::uint64_t a = base + i * kPageSize;
        visit(unit_of(s, {a, a + kPageSize}, tick), std::uint64_t{1});
      });
    }
  }
  for (const auto& [start, r] : regions_) {
    visit(unit_of(r.state, {start, r.end}, tick), std::uint64_t{1});
  }
}

}  // namespace kvtier::policy
