#include "policy/heat.hpp"

#include <algorithm>
#include <array>
#include <bit>
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

#include "policy/heat_state.hpp"
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
  for_each_page({from, from + params_.frontier_bytes}, false, [&](HeatState& s, std::uint64_t) {
    if (!s.tracked() || (s.flags & HeatState::kUsed) != 0) return;
    if (tick > s.last_access) {
      s.heat = decay_.heat_at(s, tick);
      s.last_access = tick;
    }
    s.flags |= HeatState::kAhead;
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
  const std::uint64_t base = chunk_base(addr);
  ensure_chunks(base, base + kHugePageSize);
  auto it = std::prev(extents_.upper_bound(base));
  return it->second[(base - it->first) / kHugePageSize];
}

void HeatTable::ensure_chunks(std::uint64_t a, std::uint64_t b) {
  const auto end_of = [](const auto& e) { return e.first + e.second.size() * kHugePageSize; };
  auto it = extents_.upper_bound(a);
  if (it != extents_.begin() && end_of(*std::prev(it)) >= a) --it;
  if (it != extents_.end() && it->first <= a && end_of(*it) >= b) return;
  // The extents that overlap or touch [a, b) become one, the gaps filled with new chunks.
  auto last = it;
  std::uint64_t lo = a;
  std::uint64_t hi = b;
  for (; last != extents_.end() && last->first <= b; ++last) {
    lo = std::min(lo, last->first);
    hi = std::max(hi, end_of(*last));
  }
  Extent merged;
  merged.reserve((hi - lo) / kHugePageSize);
  for (auto e = it; e != last; ++e) {
    merged.resize((e->first - lo) / kHugePageSize);
    std::move(e->second.begin(), e->second.end(), std::back_inserter(merged));
  }
  merged.resize((hi - lo) / kHugePageSize);
  extents_.erase(it, last);
  extents_.emplace(lo, std::move(merged));
}

void HeatTable::drop_untracked(std::uint64_t a, std::uint64_t b) {
  auto it = extents_.upper_bound(a);
  if (it != extents_.begin()) --it;
  while (it != extents_.end() && it->first < b) {
    const std::uint64_t first = it->first;
    Extent& e = it->second;
    const auto gone = [&](std::size_t i) {
      const std::uint64_t base = first + i * kHugePageSize;
      return base >= a && base < b && !e[i].tracked();
    };
    std::size_t i = 0;
    while (i < e.size() && !gone(i)) ++i;
    if (i == e.size()) {
      ++it;
      continue;
    }
    // Split at the first chunk that goes: what is left of it starts at the next kept one.
    Extent rest;
    std::size_t j = i;
    while (j < e.size() && gone(j)) ++j;
    rest.reserve(e.size() - j);
    std::move(e.begin() + static_cast<std::ptrdiff_t>(j), e.end(), std::back_inserter(rest));
    const std::uint64_t rest_first = first + j * kHugePageSize;
    e.resize(i);
    e.shrink_to_fit();
    it = e.empty() ? extents_.erase(it) : std::next(it);
    if (!rest.empty()) it = extents_.emplace_hint(it, rest_first, std::move(rest));
  }
}

void HeatTable::count(const HeatState& s, std::uint64_t pages, int sign) {
  if (!s.tracked()) return;
  const auto i = static_cast<std::size_t>(std::max(-1, static_cast<int>(s.node)) + 1);
  if (i >= node_bytes_.size()) node_bytes_.resize(i + 1, 0);
  if (sign > 0) {
    node_bytes_[i] += pages * kPageSize;
  } else {
    node_bytes_[i] -= pages * kPageSize;
  }
}

// Calls f(HeatState&, pages) for the pages of the range: once for a whole chunk
// whose pages are alike (pages = 512), else once per page (pages = 1).
template <class F>
void HeatTable::for_each_page(AddrRange range, bool create, F&& f) {
  const std::uint64_t a = page_down(range.start);
  const std::uint64_t b = page_up(range.end);
  if (a >= b) return;
  if (create) ensure_chunks(chunk_base(a), chunk_base(b - 1) + kHugePageSize);
  const auto visit = [&](HeatState& s, std::uint64_t pages) {
    const HeatState was = s;
    f(s, pages);
    if (was.tracked() != s.tracked() || was.node != s.node) {
      count(was, pages, -1);
      count(s, pages, 1);
    }
  };
  auto it = extents_.upper_bound(a);
  if (it != extents_.begin()) --it;
  for (; it != extents_.end() && it->first < b; ++it) {
    const std::uint64_t first = it->first;
    Extent& e = it->second;
    const std::uint64_t i0 = a > first ? (a - first) / kHugePageSize : 0;
    for (std::uint64_t ci = i0; ci < e.size() && first + ci * kHugePageSize < b; ++ci) {
      Chunk& chunk = e[ci];
      const std::uint64_t base = first + ci * kHugePageSize;
      const std::uint64_t from = std::max(a, base);
      const std::uint64_t to = std::min(b, base + kHugePageSize);
      const bool whole = from == base && to == base + kHugePageSize;
      if (whole && !chunk.pages) {
        visit(chunk.same, kPagesPerChunk);
        continue;
      }
      if (!chunk.pages) chunk.pages = std::make_unique<PagePack>(chunk.same);
      for (std::uint64_t p = from; p < to; p += kPageSize) {
        const std::uint64_t i = (p - base) / kPageSize;
        HeatState s = chunk.pages->get(i);
        const HeatState was = s;
        visit(s, 1);
        if (std::bit_cast<std::array<std::uint32_t, 4>>(s) !=
            std::bit_cast<std::array<std::uint32_t, 4>>(was)) {
          chunk.pages->set(i, s);
        }
      }
      if (whole && chunk.pages->alike()) {
        chunk.same = chunk.pages->get(0);
        chunk.pages.reset();
      }
    }
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
  for_each_page(range, true, [&](HeatState& s, std::uint64_t) {
    if (!s.tracked()) s = HeatState{.last_access = tick, .flags = HeatState::kTracked};
    s.node = n;
  });
}

void HeatTable::untrack(AddrRange range) {
  if (params_.granularity == Granularity::kRegion) {
    split_regions(page_down(range.start), page_up(range.end), 0, false);
    regions_.erase(regions_.lower_bound(page_down(range.start)),
                   regions_.lower_bound(page_up(range.end)));
    return;
  }
  for_each_page(range, false, [](HeatState& s, std::uint64_t) { s = HeatState{}; });
  const std::uint64_t a = chunk_base(page_down(range.start));
  drop_untracked(a, std::max(a, chunk_base(page_up(range.end) - 1) + kHugePageSize));
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
  const std::uint64_t a = page_down(sample.addr);
  for_each_page({a, a + kPageSize}, true, [&](HeatState& s, std::uint64_t) {
    if (!s.tracked()) s = HeatState{.last_access = tick, .flags = HeatState::kTracked};
    touch(s, tick, 1);
    // A sample of several accesses (a page that faulted twice between drains, a
    // PMU sample standing for its period) is a second touch too.
    if (sample.weight > 1 && (s.flags & HeatState::kReturned) != 0) judge_return(s, kPageSize);
    add_events(s, events, tick);
  });
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
  for_each_page(r.range, true, [&](HeatState& s, std::uint64_t pages) {
    if (!s.tracked()) s = fresh;
    if (events > 0) add_events(s, events, tick);
    if (strong) touch(s, tick, pages);
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
  for_each_page(range, false, [&](HeatState& s, std::uint64_t pages) {
    if (s.tracked()) observe_node(s, n, pages * kPageSize);
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
  for_each_page(range, false, [&](HeatState& s, std::uint64_t) {
    if (s.tracked()) moved(s, n, tick, demotion);
  });
}

void HeatTable::set_huge(std::uint64_t addr, bool huge) {
  auto it = extents_.upper_bound(chunk_base(addr));
  if (it == extents_.begin()) return;
  --it;
  const std::uint64_t i = (chunk_base(addr) - it->first) / kHugePageSize;
  if (i < it->second.size()) it->second[i].huge = huge;
}

void HeatTable::set_huge_blocks(std::span<const std::uint64_t> blocks) {
  for (auto& [first, extent] : extents_) {
    for (std::size_t i = 0; i < extent.size(); ++i) {
      extent[i].huge = std::ranges::binary_search(blocks, first + i * kHugePageSize);
    }
  }
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
  if (auto e = extents_.upper_bound(chunk_base(addr)); e != extents_.begin()) {
    --e;
    const std::uint64_t i = (chunk_base(addr) - e->first) / kHugePageSize;
    if (i < e->second.size()) {
      const Chunk& c = e->second[i];
      const HeatState s = c.page((addr % kHugePageSize) / kPageSize);
      if (!s.tracked()) return std::nullopt;
      const std::uint64_t a = page_down(addr);
      HeatUnit u = unit_of(s, {a, a + kPageSize}, tick);
      u.huge = c.huge;
      return u;
    }
  }
  auto it = regions_.upper_bound(addr);
  if (it == regions_.begin()) return std::nullopt;
  --it;
  if (it->second.end <= addr) return std::nullopt;
  return unit_of(it->second.state, {it->first, it->second.end}, tick);
}

std::uint64_t HeatTable::tracked_bytes() const {
  std::uint64_t bytes = 0;
  for (const auto& [first, extent] : extents_) {
    for (const Chunk& c : extent) {
      if (!c.pages) {
        bytes += c.same.tracked() ? kHugePageSize : 0;
        continue;
      }
      bytes += kPageSize * c.pages->tracked_pages();
    }
  }
  for (const auto& [start, r] : regions_) bytes += r.end - start;
  return bytes;
}

std::uint64_t HeatTable::memory_bytes() const {
  // A std::map node carries three pointers and a colour besides its value.
  constexpr std::uint64_t kMapNode = 32;
  std::uint64_t bytes = sizeof(*this) + node_bytes_.capacity() * sizeof(std::uint64_t);
  for (const auto& [first, extent] : extents_) {
    bytes += kMapNode + sizeof(first) + sizeof(Extent) + extent.capacity() * sizeof(Chunk);
    for (const Chunk& c : extent) bytes += c.pages ? c.pages->memory_bytes() : 0;
  }
  return bytes + regions_.size() * (kMapNode + sizeof(std::uint64_t) + sizeof(Region));
}

std::map<int, std::uint64_t> HeatTable::bytes_per_node(std::uint64_t* unknown_bytes) const {
  std::map<int, std::uint64_t> out;
  std::uint64_t unknown = 0;
  for (std::size_t i = 0; i < node_bytes_.size(); ++i) {
    if (i == 0) {
      unknown += node_bytes_[i];
    } else if (node_bytes_[i] > 0) {
      out[static_cast<int>(i) - 1] += node_bytes_[i];
    }
  }
  for (const auto& [start, r] : regions_) {
    (r.state.node >= 0 ? out[r.state.node] : unknown) += r.end - start;
  }
  if (unknown_bytes != nullptr) *unknown_bytes = unknown;
  return out;
}

}  // namespace kvtier::policy
