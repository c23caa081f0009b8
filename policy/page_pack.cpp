#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <vector>

#include "policy/heat_state.hpp"

namespace kvtier::policy {
namespace {

constexpr std::uint32_t kNarrowSpan = std::numeric_limits<std::uint16_t>::max();
// PagePack::version(): one count over every pack, so a pack made again at a
// chunk's address never repeats a version another pack there had.
std::atomic<std::uint64_t> versions{0};

std::uint64_t next_version() {
  return versions.fetch_add(1, std::memory_order_relaxed) + 1;
}

constexpr std::size_t kNarrowRests = std::size_t{std::numeric_limits<std::uint8_t>::max()} + 1;

}  // namespace

PagePack::PagePack(const HeatState& all)
    : version_(next_version()),
      base_(all.last_access),
      latest_bound_(all.last_access),
      heat_bound_(all.heat),
      tracked_(static_cast<std::uint16_t>(all.tracked() ? kPages : 0)),
      located_(static_cast<std::uint16_t>(all.tracked() && all.node >= 0 ? kPages : 0)) {
  heat_.fill(all.heat);
  rests_.push_back({.last_moved = all.last_moved, .node = all.node, .flags = all.flags});
  shares_.push_back(Share{.earliest = all.last_access,
                          .latest_bound = all.last_access,
                          .heat_bound = all.heat,
                          .at_earliest = static_cast<std::uint16_t>(kPages),
                          .pages = static_cast<std::uint16_t>(kPages)});
}

void PagePack::leave_share(std::size_t i) {
  const std::uint16_t r = index(i);
  Share& sh = shares_[r];
  --sh.pages;
  if (sh.pages == 0) {
    sh = Share{};
    return;
  }
  if (access(i) != sh.earliest || --sh.at_earliest > 0) return;
  // The last page at the share's earliest leaves: the next earliest of the others.
  std::uint32_t lo = std::numeric_limits<std::uint32_t>::max();
  std::uint16_t n = 0;
  if (!wide_access_ && !wide_index_) {
    // The common layout, branch-free: the least offset among the share's pages but i.
    std::uint16_t least = std::numeric_limits<std::uint16_t>::max();
    for (std::size_t p = 0; p < kPages; ++p) {
      const bool mine = index_[p] == r && p != i;
      least = std::min(least, mine ? access_[p] : std::numeric_limits<std::uint16_t>::max());
    }
    for (std::size_t p = 0; p < kPages; ++p) {
      n = static_cast<std::uint16_t>(n + (index_[p] == r && p != i && access_[p] == least ? 1 : 0));
    }
    sh.earliest = base_ + least;
    sh.at_earliest = n;
    return;
  }
  for (std::size_t p = 0; p < kPages; ++p) {
    if (p == i || index(p) != r) continue;
    const std::uint32_t a = access(p);
    if (a < lo) {
      lo = a;
      n = 0;
    }
    if (a == lo) ++n;
  }
  sh.earliest = lo;
  sh.at_earliest = n;
}

void PagePack::set_access(std::size_t i, std::uint32_t tick) {
  if (wide_access_) {
    wide_access_[i] = tick;
    return;
  }
  if (tick >= base_ && tick - base_ <= kNarrowSpan) {
    access_[i] = static_cast<std::uint16_t>(tick - base_);
    return;
  }
  // Out of the window: from the earliest of the others and this one, if the span fits.
  std::uint32_t lo = tick;
  std::uint32_t hi = tick;
  for (std::size_t p = 0; p < kPages; ++p) {
    if (p == i) continue;
    lo = std::min(lo, base_ + access_[p]);
    hi = std::max(hi, base_ + access_[p]);
  }
  if (hi - lo <= kNarrowSpan) {
    const std::uint32_t old = base_;
    for (std::size_t p = 0; p < kPages; ++p) {
      access_[p] = static_cast<std::uint16_t>(old + access_[p] - lo);
    }
    base_ = lo;
    access_[i] = static_cast<std::uint16_t>(tick - lo);
    return;
  }
  wide_access_ = std::make_unique_for_overwrite<std::uint32_t[]>(kPages);
  for (std::size_t p = 0; p < kPages; ++p) wide_access_[p] = base_ + access_[p];
  wide_access_[i] = tick;
}

void PagePack::drop_unused_rests() {
  std::vector<std::uint16_t> renumber(rests_.size(), 0);
  std::vector<bool> used(rests_.size(), false);
  for (std::size_t p = 0; p < kPages; ++p) used[index(p)] = true;
  std::size_t kept = 0;
  for (std::size_t r = 0; r < rests_.size(); ++r) {
    if (!used[r]) continue;
    renumber[r] = static_cast<std::uint16_t>(kept);
    shares_[kept] = shares_[r];
    rests_[kept++] = rests_[r];
  }
  rests_.resize(kept);
  shares_.resize(kept);
  for (std::size_t p = 0; p < kPages; ++p) {
    if (wide_index_) {
      wide_index_[p] = renumber[wide_index_[p]];
    } else {
      index_[p] = static_cast<std::uint8_t>(renumber[index_[p]]);
    }
  }
}

std::uint16_t PagePack::rest_index(std::size_t i, const Rest& r) {
  const std::uint16_t now = index(i);
  if (rests_[now] == r) return now;
  if (auto it = std::ranges::find(rests_, r); it != rests_.end()) {
    return static_cast<std::uint16_t>(it - rests_.begin());
  }
  // A new one; when the list is full, the ones no page uses any more go first.
  const std::size_t limit = wide_index_ ? kPages : kNarrowRests;
  if (rests_.size() >= limit) drop_unused_rests();
  if (rests_.size() >= kNarrowRests && !wide_index_) {
    wide_index_ = std::make_unique_for_overwrite<std::uint16_t[]>(kPages);
    for (std::size_t p = 0; p < kPages; ++p) wide_index_[p] = index_[p];
  }
  rests_.push_back(r);
  shares_.push_back(Share{});
  return static_cast<std::uint16_t>(rests_.size() - 1);
}

void PagePack::set(std::size_t i, const HeatState& s) {
  const Rest& was = rests_[index(i)];
  const bool tracked = (was.flags & HeatState::kTracked) != 0;
  tracked_ = static_cast<std::uint16_t>(tracked_ - (tracked ? 1 : 0) + (s.tracked() ? 1 : 0));
  located_ = static_cast<std::uint16_t>(located_ - (tracked && was.node >= 0 ? 1 : 0) +
                                        (s.tracked() && s.node >= 0 ? 1 : 0));
  version_ = next_version();
  leave_share(i);
  heat_[i] = s.heat;
  heat_bound_ = std::max(heat_bound_, s.heat);
  latest_bound_ = std::max(latest_bound_, s.last_access);
  set_access(i, s.last_access);
  const std::uint16_t r =
      rest_index(i, Rest{.last_moved = s.last_moved, .node = s.node, .flags = s.flags});
  if (wide_index_) {
    wide_index_[i] = r;
  } else {
    index_[i] = static_cast<std::uint8_t>(r);
  }
  // Page i joins its rest's share.
  Share& sh = shares_[r];
  sh.latest_bound = sh.pages == 0 ? s.last_access : std::max(sh.latest_bound, s.last_access);
  sh.heat_bound = sh.pages == 0 ? s.heat : std::max(sh.heat_bound, s.heat);
  if (sh.pages == 0 || s.last_access < sh.earliest) {
    sh.earliest = s.last_access;
    sh.at_earliest = 1;
  } else if (s.last_access == sh.earliest) {
    ++sh.at_earliest;
  }
  ++sh.pages;
}

std::uint32_t PagePack::earliest_access() const {
  std::uint32_t lo = std::numeric_limits<std::uint32_t>::max();
  for (const Share& sh : shares_) {
    if (sh.pages > 0) lo = std::min(lo, sh.earliest);
  }
  return lo;
}

std::uint16_t PagePack::flags_any() const {
  std::uint16_t f = 0;
  for (const Rest& r : rests_) f = static_cast<std::uint16_t>(f | r.flags);
  return f;
}

bool PagePack::alike() const {
  const float h = heat_[0];
  const std::uint32_t a = access(0);
  const std::uint16_t r = index(0);
  for (std::size_t p = 1; p < kPages; ++p) {
    // Bit for bit, as HeatState's == has them (floats by value: 0 == -0).
    if (heat_[p] != h || access(p) != a || index(p) != r) return false;
  }
  return true;
}

std::uint32_t PagePack::latest_access() const {
  if (wide_access_) return *std::max_element(wide_access_.get(), wide_access_.get() + kPages);
  return base_ + *std::ranges::max_element(access_);
}

int PagePack::one_node() const {
  // rests_ may still hold one no page uses: then "may differ", which is never wrong.
  const std::int16_t n = rests_.front().node;
  return std::ranges::all_of(rests_, [n](const Rest& r) { return r.node == n; }) ? n : -2;
}

std::uint64_t PagePack::memory_bytes() const {
  return sizeof(PagePack) + rests_.capacity() * sizeof(Rest) + shares_.capacity() * sizeof(Share) +
         (wide_access_ ? kPages * sizeof(std::uint32_t) : 0) +
         (wide_index_ ? kPages * sizeof(std::uint16_t) : 0);
}

}  // namespace kvtier::policy
