#include "policy/heat.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <memory>
#include <numbers>
#include <optional>
#include <span>
#include <utility>
#include <vector>

#include "policy/types.hpp"

namespace kvtier::policy {
namespace {

// Beyond this many half-lives heat is below 1e-12 of where it was: call it 0.
constexpr double kHalfLivesToZero = 40.0;

std::uint64_t page_down(std::uint64_t a) {
  return a & ~(kPageSize - 1);
}
std::uint64_t page_up(std::uint64_t a) {
  return (a + kPageSize - 1) & ~(kPageSize - 1);
}
std::uint64_t chunk_base(std::uint64_t a) {
  return a & ~(kHugePageSize - 1);
}

}  // namespace

Decay::Decay(TimeNs half_life)
    : half_life_(std::max<TimeNs>(half_life, 1)),
      per_event_(static_cast<float>(std::numbers::ln2 / (static_cast<double>(half_life_) / 1e9))) {
  const double ticks_per_half_life = static_cast<double>(half_life_) / static_cast<double>(kTickNs);
  limit_ = static_cast<std::uint32_t>(
      std::min(std::ceil(kHalfLivesToZero * ticks_per_half_life), 4294967295.0));
  hi_.resize((limit_ >> kLoBits) + 1);
  lo_.resize(1U << kLoBits);
  for (std::size_t i = 0; i < hi_.size(); ++i) {
    hi_[i] =
        static_cast<float>(std::exp2(-static_cast<double>(i << kLoBits) / ticks_per_half_life));
  }
  for (std::size_t i = 0; i < lo_.size(); ++i) {
    lo_[i] = static_cast<float>(std::exp2(-static_cast<double>(i) / ticks_per_half_life));
  }
}

HeatTable::HeatTable(HeatParams params)
    : params_(params),
      decay_(params.half_life),
      misdemotion_ticks_(static_cast<std::uint32_t>(
          std::min<TimeNs>((params.misdemotion_window + kTickNs - 1) / kTickNs, 0xffffffffU))) {}

// `pages`: how many pages share the state `s` (a chunk's pages alike).
void HeatTable::touch(HeatState& s, std::uint32_t tick, std::uint64_t pages) {
  if ((s.flags & HeatState::kDemoted) != 0) {
    s.flags &= static_cast<std::uint16_t>(~HeatState::kDemoted);
    events_.touched_demoted_pages += pages;
    const bool soon = tick >= s.last_moved && tick - s.last_moved < misdemotion_ticks_;
    s.flags |= HeatState::kReturned;
    if (soon) s.flags |= HeatState::kReturnedSoon;
  } else if ((s.flags & HeatState::kReturned) != 0) {
    judge_return(s, pages * kPageSize);
  }
  s.flags |= HeatState::kTouched | HeatState::kUsed;
}

void HeatTable::judge_return(HeatState& s, std::uint64_t bytes) {
  if ((s.flags & HeatState::kReturnedSoon) != 0) {
    s.set_strikes(s.strikes() + 1);
    events_.misdemoted_bytes += bytes;
  } else {
    // Cold when it went, in use again now: a reactivation, not a mistake.
    s.set_strikes(0);
    events_.reactivated_bytes += bytes;
  }
  s.flags &= static_cast<std::uint16_t>(~(HeatState::kReturned | HeatState::kReturnedSoon));
}

void HeatTable::anticipate(std::uint64_t addr, std::uint32_t tick) {
  const std::uint64_t from = page_down(addr) + kPageSize;
  for_each_page({from, from + params_.frontier_bytes}, [&](HeatState* s, std::uint64_t) {
    if (s == nullptr) return false;  // nothing tracked there
    if (!s->tracked() || (s->flags & HeatState::kUsed) != 0) return false;
    if (tick > s->last_access) {
      s->heat = decay_.heat_at(*s, tick);
      s->last_access = tick;
    }
    s->flags |= HeatState::kAhead;
    return false;
  });
}

void HeatTable::add_events(HeatState& s, double events, std::uint32_t tick) const {
  const double added = events * decay_.per_event();
  if (tick >= s.last_access) {
    s.heat = static_cast<float>(s.heat * decay_.factor(tick - s.last_access) + added);
    s.last_access = tick;
  } else {
    // A late sample: it counts, decayed to the newer state's time.
    s.heat = static_cast<float>(s.heat + added * decay_.factor(s.last_access - tick));
  }
}

HeatTable::Chunk& HeatTable::chunk_for(std::uint64_t addr) {
  return chunks_.try_emplace(chunk_base(addr)).first->second;
}

void HeatTable::spread(Chunk& c) {
  if (c.pages) return;
  c.pages = std::make_unique_for_overwrite<HeatState[]>(kPagesPerChunk);
  std::fill_n(c.pages.get(), kPagesPerChunk, c.same);
}

void HeatTable::fold(Chunk& c) {
  if (!c.pages) return;
  const HeatState* p = c.pages.get();
  if (!std::all_of(p + 1, p + kPagesPerChunk, [&](const HeatState& s) { return s == p[0]; })) {
    return;
  }
  c.same = p[0];
  c.pages.reset();
}

// Calls f(HeatState*, pages) for the pages of the range: once for a whole chunk
// whose pages are alike (pages = 512), else once per page (pages = 1). First
// f(nullptr, 0) for a chunk not there yet: true creates it (untracked pages).
template <class F>
void HeatTable::for_each_page(AddrRange range, F&& f) {
  const std::uint64_t a = page_down(range.start);
  const std::uint64_t b = page_up(range.end);
  for (std::uint64_t base = chunk_base(a); base < b; base += kHugePageSize) {
    auto it = chunks_.find(base);
    Chunk* chunk = nullptr;
    if (it != chunks_.end()) {
      chunk = &it->second;
    } else if (!f(nullptr, 0)) {
      continue;
    } else {
      chunk = &chunk_for(base);
    }
    const std::uint64_t from = std::max(a, base);
    const std::uint64_t to = std::min(b, base + kHugePageSize);
    const bool whole = from == base && to == base + kHugePageSize;
    if (whole && !chunk->pages) {
      f(&chunk->same, kPagesPerChunk);
      continue;
    }
    spread(*chunk);
    for (std::uint64_t p = from; p < to; p += kPageSize) {
      f(&chunk->pages[(p - base) / kPageSize], std::uint64_t{1});
    }
    if (whole) fold(*chunk);
  }
}

template <class F>
void HeatTable::for_each_region(AddrRange range, F&& f) {
  for (auto it = regions_.lower_bound(range.start); it != regions_.end() && it->first < range.end;
       ++it) {
    f(it->second.state, it->first, it->second.end);
  }
}

void HeatTable::split_regions(std::uint64_t a, std::uint64_t b, std::uint32_t tick,
                              bool fill_gaps) {
  for (const std::uint64_t at : {a, b}) {
    auto it = regions_.upper_bound(at);
    if (it == regions_.begin()) continue;
    --it;
    if (it->first < at && it->second.end > at) {
      Region right = it->second;
      it->second.end = at;
      regions_.emplace(at, right);
    }
  }
  if (!fill_gaps) return;
  std::uint64_t cursor = a;
  const HeatState fresh{.last_access = tick, .flags = HeatState::kTracked};
  std::vector<std::pair<std::uint64_t, std::uint64_t>> gaps;
  for (auto it = regions_.lower_bound(a); it != regions_.end() && it->first < b; ++it) {
    if (it->first > cursor) gaps.emplace_back(cursor, it->first);
    cursor = it->second.end;
  }
  if (cursor < b) gaps.emplace_back(cursor, b);
  for (const auto& [s, e] : gaps) regions_.emplace(s, Region{.end = e, .state = fresh});
}

void HeatTable::track(AddrRange range, int node, TimeNs now) {
  const std::uint32_t tick = to_tick(now);
  const auto n = static_cast<std::int16_t>(node);
  if (params_.granularity == Granularity::kRegion) {
    split_regions(page_down(range.start), page_up(range.end), tick, true);
    for_each_region(range, [&](HeatState& s, std::uint64_t, std::uint64_t) { s.node = n; });
    return;
  }
  for_each_page(range, [&](HeatState* s, std::uint64_t) {
    if (s == nullptr) return true;
    if (!s->tracked()) *s = HeatState{.last_access = tick, .flags = HeatState::kTracked};
    s->node = n;
    return true;
  });
}

void HeatTable::untrack(AddrRange range) {
  if (params_.granularity == Granularity::kRegion) {
    split_regions(page_down(range.start), page_up(range.end), 0, false);
    regions_.erase(regions_.lower_bound(page_down(range.start)),
                   regions_.lower_bound(page_up(range.end)));
    return;
  }
  for_each_page(range, [](HeatState* s, std::uint64_t) {
    if (s != nullptr) *s = HeatState{};
    return false;
  });
  std::erase_if(chunks_, [](const auto& kv) {
    const HeatState* p = kv.second.pages.get();
    if (p == nullptr) return !kv.second.same.tracked();
    return std::none_of(p, p + kPagesPerChunk, [](const HeatState& s) { return s.tracked(); });
  });
}

void HeatTable::add(const AccessSample& sample) {
  const std::uint32_t tick = to_tick(sample.time);
  const double events = sample.weight;
  if (params_.granularity == Granularity::kRegion) {
    auto it = regions_.upper_bound(sample.addr);
    if (it != regions_.begin() && std::prev(it)->second.end > sample.addr) {
      --it;
    } else {
      const std::uint64_t a = page_down(sample.addr);
      it = regions_
               .emplace(a, Region{.end = a + kPageSize,
                                  .state = {.last_access = tick, .flags = HeatState::kTracked}})
               .first;
    }
    // Region heat is per page: one access is spread over the region's pages.
    const std::uint64_t bytes = it->second.end - it->first;
    const double pages = static_cast<double>(bytes) / static_cast<double>(kPageSize);
    touch(it->second.state, tick, bytes / kPageSize);
    add_events(it->second.state, events / pages, tick);
    return;
  }
  Chunk& c = chunk_for(sample.addr);
  spread(c);
  HeatState& s = c.pages[(sample.addr % kHugePageSize) / kPageSize];
  if (!s.tracked()) s = HeatState{.last_access = tick, .flags = HeatState::kTracked};
  touch(s, tick, 1);
  // A sample of several accesses (a page that faulted twice between drains, a
  // PMU sample standing for its period) is a second touch too.
  if (sample.weight > 1 && (s.flags & HeatState::kReturned) != 0) judge_return(s, kPageSize);
  add_events(s, events, tick);
  if (params_.frontier_bytes > 0) anticipate(sample.addr, tick);
}

void HeatTable::add(const RegionAccess& r) {
  const std::uint32_t tick = to_tick(r.time);
  // A new region that has been idle for `age` intervals was last touched that long ago.
  const std::uint64_t idle_ticks =
      r.nr_accesses == 0 ? r.age * params_.region_interval / kTickNs : 0;
  const HeatState fresh{
      .last_access = tick - static_cast<std::uint32_t>(std::min<std::uint64_t>(idle_ticks, tick)),
      .flags = HeatState::kTracked};
  const double events = r.nr_accesses;
  const bool strong =
      r.nr_accesses > 0 && params_.region_touch_share > 0 &&
      static_cast<double>(r.nr_accesses) >= params_.region_touch_share * r.max_nr_accesses;
  if (params_.granularity == Granularity::kRegion) {
    const std::uint64_t a = page_down(r.range.start);
    const std::uint64_t b = page_up(r.range.end);
    split_regions(a, b, fresh.last_access, true);
    if (events > 0) {
      for_each_region(r.range, [&](HeatState& s, std::uint64_t, std::uint64_t) {
        add_events(s, events, tick);
      });
    }
    return;
  }
  for_each_page(r.range, [&](HeatState* s, std::uint64_t pages) {
    if (s == nullptr) return true;
    if (!s->tracked()) *s = fresh;
    if (events > 0) add_events(*s, events, tick);
    if (strong) touch(*s, tick, pages);
    return true;
  });
}

// Residency as read: memory that someone else moved (the kernel's promotion in
// the fault path, reclaim's demotion) is no longer kvtier's demotion.
void HeatTable::observe_node(HeatState& s, std::int16_t n, std::uint64_t bytes) {
  if (s.node >= 0 && n >= 0 && s.node != n) {
    if ((s.flags & HeatState::kTouched) != 0) events_.moved_by_kernel_bytes += bytes;
    s.flags &= static_cast<std::uint16_t>(~(HeatState::kDemoted | HeatState::kTouched));
  }
  s.node = n;
}

namespace {

void moved(HeatState& s, std::int16_t n, std::uint32_t tick, bool demotion) {
  s.node = n;
  s.last_moved = tick;
  s.flags &=
      static_cast<std::uint16_t>(~(HeatState::kDemoted | HeatState::kTouched | HeatState::kAhead));
  // Demoted again with a return unjudged: it was touched once, a one-off.
  if (demotion) {
    s.flags &= static_cast<std::uint16_t>(~(HeatState::kReturned | HeatState::kReturnedSoon));
    s.flags |= HeatState::kDemoted;
  }
}

}  // namespace

void HeatTable::set_node(AddrRange range, int node) {
  const auto n = static_cast<std::int16_t>(node);
  if (params_.granularity == Granularity::kRegion) {
    split_regions(page_down(range.start), page_up(range.end), 0, false);
    for_each_region(
        range, [&](HeatState& s, std::uint64_t a, std::uint64_t b) { observe_node(s, n, b - a); });
    return;
  }
  for_each_page(range, [&](HeatState* s, std::uint64_t pages) {
    if (s != nullptr && s->tracked()) observe_node(*s, n, pages * kPageSize);
    return false;
  });
}

void HeatTable::mark_moved(AddrRange range, int node, TimeNs now, bool demotion) {
  const auto n = static_cast<std::int16_t>(node);
  const std::uint32_t tick = std::max<std::uint32_t>(to_tick(now), 1);
  if (params_.granularity == Granularity::kRegion) {
    split_regions(page_down(range.start), page_up(range.end), 0, false);
    for_each_region(
        range, [&](HeatState& s, std::uint64_t, std::uint64_t) { moved(s, n, tick, demotion); });
    return;
  }
  for_each_page(range, [&](HeatState* s, std::uint64_t) {
    if (s != nullptr && s->tracked()) moved(*s, n, tick, demotion);
    return false;
  });
}

void HeatTable::set_huge(std::uint64_t addr, bool huge) {
  auto it = chunks_.find(chunk_base(addr));
  if (it != chunks_.end()) it->second.huge = huge;
}

void HeatTable::set_huge_blocks(std::span<const std::uint64_t> blocks) {
  for (auto& [base, chunk] : chunks_) chunk.huge = std::ranges::binary_search(blocks, base);
}

void HeatTable::compact(TimeNs now, double tolerance) {
  const std::uint32_t now_tick = to_tick(now);
  if (regions_.size() < 2) return;
  auto prev = regions_.begin();
  for (auto it = std::next(prev); it != regions_.end();) {
    Region& p = prev->second;
    Region& r = it->second;
    const float np = decay_.heat_at(p.state, now_tick);
    const float nr = decay_.heat_at(r.state, now_tick);
    const bool alike =
        p.end == it->first && p.state.node == r.state.node && p.state.flags == r.state.flags &&
        std::abs(np - nr) <= static_cast<float>(tolerance) * std::max(np, nr) + 1e-3F;
    if (!alike) {
      prev = it++;
      continue;
    }
    const std::uint32_t at = std::max(p.state.last_access, r.state.last_access);
    const float hp = decay_.heat_at(p.state, at);
    const float hr = decay_.heat_at(r.state, at);
    const auto wp = static_cast<double>(p.end - prev->first);
    const auto wr = static_cast<double>(r.end - it->first);
    p.state.heat = static_cast<float>((hp * wp + hr * wr) / (wp + wr));
    p.state.last_access = at;
    // The later move wins, so merging never shortens a residence.
    p.state.last_moved = std::max(p.state.last_moved, r.state.last_moved);
    p.end = r.end;
    it = regions_.erase(it);
  }
}

std::optional<HeatUnit> HeatTable::at(std::uint64_t addr, TimeNs now) const {
  const std::uint32_t tick = to_tick(now);
  if (auto c = chunks_.find(chunk_base(addr)); c != chunks_.end()) {
    const HeatState& s = c->second.page((addr % kHugePageSize) / kPageSize);
    if (!s.tracked()) return std::nullopt;
    const std::uint64_t a = page_down(addr);
    HeatUnit u = unit_of(s, {a, a + kPageSize}, tick);
    u.huge = c->second.huge;
    return u;
  }
  auto it = regions_.upper_bound(addr);
  if (it == regions_.begin()) return std::nullopt;
  --it;
  if (it->second.end <= addr) return std::nullopt;
  return unit_of(it->second.state, {it->first, it->second.end}, tick);
}

std::uint64_t HeatTable::tracked_bytes() const {
  std::uint64_t bytes = 0;
  for (const auto& [base, c] : chunks_) {
    if (!c.pages) {
      bytes += c.same.tracked() ? kHugePageSize : 0;
      continue;
    }
    bytes += kPageSize * static_cast<std::uint64_t>(
                             std::count_if(c.pages.get(), c.pages.get() + kPagesPerChunk,
                                           [](const HeatState& s) { return s.tracked(); }));
  }
  for (const auto& [start, r] : regions_) bytes += r.end - start;
  return bytes;
}

std::uint64_t HeatTable::memory_bytes() const {
  // A std::map node carries three pointers and a colour besides its value.
  constexpr std::uint64_t kMapNode = 32;
  std::uint64_t spread_chunks = 0;
  for (const auto& [base, c] : chunks_) spread_chunks += c.pages ? 1 : 0;
  return chunks_.size() * (kMapNode + sizeof(std::uint64_t) + sizeof(Chunk)) +
         spread_chunks * kPagesPerChunk * sizeof(HeatState) +
         regions_.size() * (kMapNode + sizeof(std::uint64_t) + sizeof(Region)) + sizeof(*this);
}

}  // namespace kvtier::policy
