#include "policy/coaccess.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <iterator>
#include <optional>
#include <span>
#include <utility>
#include <vector>

#include "policy/types.hpp"

namespace kvtier::policy {

std::optional<CoGroupId> CoAccessGroups::group_of(std::uint64_t addr) const {
  auto it = index_.upper_bound(addr);
  if (it == index_.begin()) return std::nullopt;
  --it;
  if (addr >= it->second.first) return std::nullopt;
  return it->second.second;
}

std::optional<CoGroupId> CoAccessGroups::touch(std::uint64_t page, TimeNs t, TimeNs rearm) {
  page &= ~(kPageSize - 1);
  if (auto it = trials_.find(page); it != trials_.end()) {
    judged_.hit_bytes += it->second.bytes;
    ++judged_.hits;
    trials_.erase(it);
  }
  if (!episode_.pages.empty() && t >= episode_.start + p_.window) close();
  if (episode_.pages.empty()) episode_.start = t;
  if (episode_.pages.size() < p_.max_group_bytes / kPageSize) episode_.pages.push_back(page);
  const auto g = group_of(page);
  if (!g) return std::nullopt;
  Group& grp = groups_.at(*g);
  grp.last_seen = std::max(grp.last_seen, t);
  if (grp.last_trigger && t < *grp.last_trigger + rearm) return std::nullopt;
  grp.last_trigger = t;
  episode_.triggered.push_back(*g);
  return g;
}

// The episode's pages in no group join the one group it triggered, or make a
// new one; each group it touched takes its last page touched as its witness.
void CoAccessGroups::close() {
  Episode e = std::exchange(episode_, Episode{});
  std::vector<std::uint64_t> fresh;
  std::vector<std::uint64_t> seen = e.pages;
  std::ranges::sort(seen);
  seen.erase(std::ranges::unique(seen).begin(), seen.end());
  std::vector<bool> taken(seen.size(), false);
  std::vector<CoGroupId> witnessed;
  for (auto it = e.pages.rbegin(); it != e.pages.rend(); ++it) {
    const auto pos = static_cast<std::size_t>(std::ranges::lower_bound(seen, *it) - seen.begin());
    if (taken[pos]) continue;
    taken[pos] = true;
    const auto g = group_of(*it);
    if (!g) {
      fresh.push_back(*it);
    } else if (std::ranges::find(witnessed, *g) == witnessed.end()) {
      witnessed.push_back(*g);
      groups_.at(*g).witness = *it;  // the last page of it this episode touched
    }
  }
  std::ranges::reverse(fresh);  // in the order touched
  std::ranges::sort(e.triggered);
  e.triggered.erase(std::ranges::unique(e.triggered).begin(), e.triggered.end());
  if (fresh.empty()) return;
  CoGroupId into = 0;
  if (e.triggered.size() == 1 && groups_.contains(e.triggered[0])) {
    into = e.triggered[0];
  } else if (fresh.size() >= 2) {
    into = next_id_++;
    groups_[into] = Group{.last_seen = e.start};
  } else {
    return;
  }
  Group& grp = groups_.at(into);
  const std::uint64_t room =
      grp.bytes >= p_.max_group_bytes ? 0 : (p_.max_group_bytes - grp.bytes) / kPageSize;
  if (fresh.size() > room) fresh.resize(room);
  if (fresh.empty()) return;
  add_pages(into, fresh);
  grp.witness = fresh.back();
}

void CoAccessGroups::add_pages(CoGroupId g, std::span<const std::uint64_t> pages) {
  Group& grp = groups_.at(g);
  std::vector<std::uint64_t> sorted(pages.begin(), pages.end());
  std::ranges::sort(sorted);
  // Drop the group's runs from the index, merge, and index them again.
  for (const AddrRange& r : grp.runs) index_.erase(r.start);
  std::vector<AddrRange> runs = grp.runs;
  for (const std::uint64_t p : sorted) runs.push_back({p, p + kPageSize});
  std::ranges::sort(runs, {}, &AddrRange::start);
  std::vector<AddrRange> merged;
  for (const AddrRange& r : runs) {
    if (!merged.empty() && merged.back().end >= r.start) {
      merged.back().end = std::max(merged.back().end, r.end);
    } else {
      merged.push_back(r);
    }
  }
  grp.bytes = 0;
  for (const AddrRange& r : merged) {
    grp.bytes += r.bytes();
    index_[r.start] = {r.end, g};
  }
  grp.runs = std::move(merged);
}

void CoAccessGroups::settle(TimeNs now) {
  if (!episode_.pages.empty() && now >= episode_.start + p_.window) close();
  std::erase_if(trials_, [&](const auto& kv) {
    if (now < kv.second.deadline) return false;
    judged_.wasted_bytes += kv.second.bytes;
    ++judged_.wastes;
    // A group whose witness did not come back is not one: forget it.
    const CoGroupId g = kv.second.group;
    if (auto it = groups_.find(g); it != groups_.end()) {
      for (const AddrRange& r : it->second.runs) index_.erase(r.start);
      groups_.erase(it);
    }
    return true;
  });
}

void CoAccessGroups::start_trial(CoGroupId g, std::uint64_t bytes, TimeNs deadline) {
  auto it = groups_.find(g);
  if (it == groups_.end() || it->second.witness == 0) return;
  trials_[it->second.witness] = Trial{.group = g, .bytes = bytes, .deadline = deadline};
}

std::span<const AddrRange> CoAccessGroups::ranges(CoGroupId g) const {
  auto it = groups_.find(g);
  return it == groups_.end() ? std::span<const AddrRange>() : std::span(it->second.runs);
}

std::uint64_t CoAccessGroups::witness(CoGroupId g) const {
  auto it = groups_.find(g);
  return it == groups_.end() ? 0 : it->second.witness;
}

void CoAccessGroups::forget(CoGroupId g) {
  auto it = groups_.find(g);
  if (it == groups_.end()) return;
  for (const AddrRange& r : it->second.runs) index_.erase(r.start);
  std::erase_if(trials_, [&](const auto& kv) { return kv.second.group == g; });
  groups_.erase(it);
}

void CoAccessGroups::forget_range(AddrRange range) {
  std::vector<CoGroupId> gone;
  auto it = index_.upper_bound(range.start);
  if (it != index_.begin()) --it;
  for (; it != index_.end() && it->first < range.end; ++it) {
    if (it->second.first > range.start) gone.push_back(it->second.second);
  }
  for (const CoGroupId g : gone) forget(g);
}

std::uint64_t CoAccessGroups::memory_bytes() const {
  // A map node and an unordered_map node cost about their value and four pointers.
  constexpr std::uint64_t kNode = 32;
  return index_.size() * (sizeof(std::uint64_t) * 3 + kNode) +
         groups_.size() * (sizeof(Group) + kNode) +
         [&] {
           std::uint64_t runs = 0;
           for (const auto& [id, g] : groups_) runs += g.runs.capacity() * sizeof(AddrRange);
           return runs;
         }() +
         episode_.pages.capacity() * sizeof(std::uint64_t) +
         trials_.size() * (sizeof(Trial) + sizeof(std::uint64_t) + kNode);
}

void CoAccessGroups::trim(TimeNs now, std::uint64_t budget) {
  std::vector<std::pair<TimeNs, CoGroupId>> by_age;
  by_age.reserve(groups_.size());
  for (const auto& [id, g] : groups_) by_age.emplace_back(g.last_seen, id);
  std::ranges::sort(by_age);
  for (const auto& [seen, id] : by_age) {
    if (now < seen + p_.idle_ttl && memory_bytes() <= budget) break;
    forget(id);
  }
}

void GroupHitRate::add(const GroupJudged& j) {
  const std::uint64_t n = j.hits + j.wastes;
  if (n == 0) return;
  const double keep = std::pow(1.0 - 1.0 / kWindow, static_cast<double>(n));
  hit_ = hit_ * keep + static_cast<double>(j.hit_bytes);
  all_ = all_ * keep + static_cast<double>(j.hit_bytes + j.wasted_bytes);
  judged_ += n;
}

double GroupHitRate::rate() const {
  return all_ > 0 ? hit_ / all_ : 1.0;
}

}  // namespace kvtier::policy
