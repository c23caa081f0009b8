#include "agent/loop/shared_pools.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "agent/host/move_pages_call.hpp"
#include "agent/host/procfs.hpp"
#include "policy/types.hpp"
#include "policy/units.hpp"

namespace kvtier::agent {
namespace {

std::set<Pid> borrowers(const SharedPool& p) {
  std::set<Pid> out;
  for (const auto& m : p.borrowed) out.insert(m.pid);
  return out;
}

std::string describe_pool(const PoolKey& key, const SharedPool& p) {
  return fmt::format("shared pool {} (dev {:x}:{:x} inode {})", p.path, key.dev_major,
                     key.dev_minor, key.inode);
}

// One line when a pool appears, or its owner or the set of its other sharers changes.
void say(const PoolKey& key, const SharedPool& now, const SharedPool* before) {
  if (before != nullptr && before->owner == now.owner && borrowers(*before) == borrowers(now)) {
    return;
  }
  const std::set<Pid> others = borrowers(now);
  spdlog::info("{}: {} tracked through target {} at {:#x}, {} other mapping(s) by target(s) {}",
               describe_pool(key, now), policy::format_size(now.owner.range.bytes()), now.owner.pid,
               now.owner.range.start, now.borrowed.size(),
               others.empty() ? std::string("none") : fmt::format("{}", fmt::join(others, ", ")));
}

}  // namespace

void SharedPools::update(const std::map<Pid, std::vector<MapEntry>>& maps,
                         std::uint64_t min_bytes) {
  // By pid, then address: the first mapping of a pool is the lowest pid's lowest.
  std::map<PoolKey, std::vector<PoolMapping>> found;
  std::map<PoolKey, std::string> paths;
  for (const auto& [pid, entries] : maps) {
    for (const auto& e : entries) {
      if (!is_shared_pool(e) || e.range.bytes() < min_bytes) continue;
      const PoolKey key{.dev_major = e.dev_major, .dev_minor = e.dev_minor, .inode = e.inode};
      found[key].push_back({.pid = pid, .range = e.range, .offset = e.offset});
      paths.try_emplace(key, e.path);
    }
  }
  std::map<PoolKey, SharedPool> next;
  for (auto& [key, mappings] : found) {
    auto old = pools_.find(key);
    auto owner = mappings.begin();
    if (old != pools_.end()) {
      if (auto kept = std::ranges::find(mappings, old->second.owner); kept != mappings.end()) {
        owner = kept;
      }
    }
    SharedPool p{.path = paths[key], .owner = *owner};
    for (auto it = mappings.begin(); it != mappings.end(); ++it) {
      if (it != owner) p.borrowed.push_back(*it);
    }
    say(key, p, old == pools_.end() ? nullptr : &old->second);
    next.emplace(key, std::move(p));
  }
  for (const auto& [key, p] : pools_) {
    if (!next.contains(key)) spdlog::info("{}: no target maps it now", describe_pool(key, p));
  }
  pools_ = std::move(next);
  index();
}

void SharedPools::index() {
  by_pid_.clear();
  for (const auto& [key, p] : pools_) {
    for (const auto& m : p.borrowed) {
      by_pid_[m.pid].push_back({.range = m.range, .offset = m.offset, .owner = p.owner});
    }
  }
  for (auto& [pid, v] : by_pid_) {
    std::ranges::sort(v, {}, [](const Borrowed& b) { return b.range.start; });
  }
}

bool SharedPools::owns(Pid pid, AddrRange range) const {
  return std::ranges::any_of(pools_, [&](const auto& kv) {
    return kv.second.owner.pid == pid && kv.second.owner.range == range;
  });
}

std::vector<AddrRange> SharedPools::borrowed(Pid pid) const {
  std::vector<AddrRange> out;
  auto it = by_pid_.find(pid);
  if (it == by_pid_.end()) return out;
  for (const auto& b : it->second) out.push_back(b.range);
  return out;
}

std::optional<SharedPools::OwnerAddr> SharedPools::owner_addr(Pid pid, std::uint64_t addr) const {
  auto it = by_pid_.find(pid);
  if (it == by_pid_.end()) return std::nullopt;
  const auto& v = it->second;
  auto b = std::ranges::upper_bound(v, addr, {}, [](const Borrowed& x) { return x.range.start; });
  if (b == v.begin() || !std::prev(b)->range.contains(addr)) return std::nullopt;
  const Borrowed& m = *std::prev(b);
  const std::uint64_t file = m.offset + (addr - m.range.start);
  if (file < m.owner.offset || file - m.owner.offset >= m.owner.range.bytes()) return std::nullopt;
  return OwnerAddr{.pid = m.owner.pid, .addr = m.owner.range.start + (file - m.owner.offset)};
}

void SharedPools::to_owners(std::vector<AccessSample>& samples,
                            std::vector<RegionAccess>& regions) const {
  if (by_pid_.empty()) return;
  for (auto& s : samples) {
    if (auto o = owner_addr(s.pid, s.addr)) {
      s.pid = o->pid;
      s.addr = o->addr;
    }
  }
  const std::size_t n = regions.size();
  for (std::size_t i = 0; i < n; ++i) {
    auto it = by_pid_.find(regions[i].pid);
    if (it == by_pid_.end()) continue;
    const RegionAccess r = regions[i];  // regions grows below
    for (const auto& b : it->second) {
      const std::uint64_t lo = std::max(b.range.start, r.range.start);
      const std::uint64_t hi = std::min(b.range.end, r.range.end);
      if (lo >= hi) continue;
      // The part's file bytes, within what the owner's mapping covers.
      const std::uint64_t file_lo = std::max(b.offset + (lo - b.range.start), b.owner.offset);
      const std::uint64_t file_hi =
          std::min(b.offset + (hi - b.range.start), b.owner.offset + b.owner.range.bytes());
      if (file_lo >= file_hi) continue;
      RegionAccess part = r;
      part.pid = b.owner.pid;
      part.range = {b.owner.range.start + (file_lo - b.owner.offset),
                    b.owner.range.start + (file_hi - b.owner.offset)};
      regions.push_back(part);
    }
  }
}

std::vector<std::pair<Pid, std::uint64_t>> SharedPools::in_borrowed(Pid pid,
                                                                    std::uint64_t addr) const {
  std::vector<std::pair<Pid, std::uint64_t>> out;
  for (const auto& [key, p] : pools_) {
    if (p.owner.pid != pid || !p.owner.range.contains(addr)) continue;
    const std::uint64_t file = p.owner.offset + (addr - p.owner.range.start);
    for (const auto& m : p.borrowed) {
      if (file >= m.offset && file - m.offset < m.range.bytes()) {
        out.emplace_back(m.pid, m.range.start + (file - m.offset));
      }
    }
  }
  return out;
}

MovePagesFn through_sharers(MovePagesFn inner, std::shared_ptr<const SharedPools> pools) {
  return [inner = std::move(inner), pools = std::move(pools)](
             Pid pid, std::span<void*> pages, const int* nodes, std::span<int> status,
             int flags) -> MovePagesResult {
    const MovePagesResult r = inner(pid, pages, nodes, status, flags);
    if (r.ret < 0 || pools->all().empty()) return r;
    // Per sharer: the pages to try there, their index in `pages` and their node.
    struct Retry {
      std::vector<void*> pages;
      std::vector<std::size_t> index;
      std::vector<int> nodes;
    };
    std::map<Pid, Retry> retry;
    for (std::size_t i = 0; i < pages.size(); ++i) {
      if (status[i] != -ENOENT) continue;
      for (const auto& [other, addr] :
           pools->in_borrowed(pid, reinterpret_cast<std::uint64_t>(pages[i]))) {
        Retry& t = retry[other];
        t.pages.push_back(reinterpret_cast<void*>(addr));  // NOLINT(performance-no-int-to-ptr)
        t.index.push_back(i);
        if (nodes != nullptr) t.nodes.push_back(nodes[i]);
      }
    }
    for (auto& [other, t] : retry) {
      std::vector<int> st(t.pages.size(), -ENOENT);
      inner(other, t.pages, nodes != nullptr ? t.nodes.data() : nullptr, st, flags);
      for (std::size_t j = 0; j < st.size(); ++j) {
        if (st[j] >= 0 && status[t.index[j]] == -ENOENT) status[t.index[j]] = st[j];
      }
    }
    return r;
  };
}

}  // namespace kvtier::agent
