#include "agent/loop/target_set.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <utility>
#include <vector>

#include "agent/host/host_paths.hpp"
#include "agent/host/procfs.hpp"
#include "agent/loop/shared_pools.hpp"
#include "policy/config.hpp"
#include "policy/error.hpp"
#include "policy/heat.hpp"
#include "policy/types.hpp"
#include "policy/units.hpp"

namespace kvtier::agent {
namespace {

// Mappings smaller than this are not worth tracking (stacks of threads,
// small heaps): the KV cache lives in large anonymous pools.
constexpr std::uint64_t kMinVmaBytes = 1ULL << 20;

// Parts of `old_ranges` that no range of `new_ranges` covers (both sorted, disjoint).
std::vector<AddrRange> subtract(const std::vector<AddrRange>& old_ranges,
                                const std::vector<AddrRange>& new_ranges) {
  std::vector<AddrRange> out;
  for (const auto& o : old_ranges) {
    std::uint64_t cur = o.start;
    for (const auto& n : new_ranges) {
      if (n.end <= cur || n.start >= o.end) continue;
      if (n.start > cur) out.push_back({cur, n.start});
      cur = std::max(cur, n.end);
    }
    if (cur < o.end) out.push_back({cur, o.end});
  }
  return out;
}

struct TrackedVmas {
  std::vector<AddrRange> vmas;  // sorted
  std::uint64_t skipped_bytes = 0;
};

// The movable anonymous mappings of 1 MiB or more and the shared pools `pid`
// owns, in address order, up to `host_bytes` in all (0: no bound). Residency is read page by page
// every step, so what is tracked must stay within what the host could hold: a mapping larger than
// all its memory is a reservation (an allocator's arena, a sanitizer's shadow), mostly never
// touched, and any process can make one of many terabytes for free.
TrackedVmas pick_vmas(const std::vector<MapEntry>& maps, std::uint64_t host_bytes,
                      const SharedPools& pools, Pid pid) {
  TrackedVmas out;
  std::uint64_t tracked = 0;
  for (const auto& e : maps) {
    const bool mine = is_movable_anon(e) || (is_shared_pool(e) && pools.owns(pid, e.range));
    if (!mine || e.range.bytes() < kMinVmaBytes) continue;
    if (host_bytes > 0 && tracked + e.range.bytes() > host_bytes) {
      out.skipped_bytes += e.range.bytes();
      continue;
    }
    tracked += e.range.bytes();
    out.vmas.push_back(e.range);
  }
  return out;
}

// Keeps the CPU time samples of the last kCpuHistory (Target::cpu_samples).
void note_cpu_time(Target& t, const Result<TimeNs>& cpu, TimeNs now) {
  constexpr TimeNs kCpuHistory = TimeNs{600} * 1'000'000'000;
  if (!cpu) return;
  auto& samples = t.cpu_samples;
  if (!samples.empty() && (now <= samples.back().first || *cpu < samples.back().second)) return;
  samples.emplace_back(now, *cpu);
  while (samples.size() > 2 && now - samples[1].first >= kCpuHistory) {
    samples.erase(samples.begin());
  }
}

}  // namespace

TargetSet::TargetSet(HostPaths paths, Pid self, std::shared_ptr<SharedPools> pools)
    : paths_(std::move(paths)), self_(self), pools_(std::move(pools)) {}

bool TargetSet::discover(const policy::CompiledConfig& config, const HeatParamsFn& params) {
  std::set<Pid> seen;
  bool changed = false;
  for (Pid pid : list_pids(paths_)) {
    const Verdict v = judge(config, pid, params);
    if (v.selected) seen.insert(pid);
    changed |= v.changed;
  }
  changed |= std::erase_if(targets_, [&seen](const auto& kv) {
               if (seen.contains(kv.first)) return false;
               spdlog::info("target {} ({}) is gone", kv.first, kv.second.comm);
               return true;
             }) > 0;
  return changed;
}

bool TargetSet::consider(const policy::CompiledConfig& config, Pid pid,
                         const HeatParamsFn& params) {
  const Verdict v = judge(config, pid, params);
  if (!v.selected) return forget(pid, "is no longer selected") || v.changed;
  return v.changed;
}

bool TargetSet::forget(Pid pid, std::string_view why) {
  auto it = targets_.find(pid);
  if (it == targets_.end()) return false;
  spdlog::info("target {} ({}) {}", pid, it->second.comm, why);
  targets_.erase(it);
  return true;
}

// Whether `pid` is selected now, and whether it joined (or changed group).
TargetSet::Verdict TargetSet::judge(const policy::CompiledConfig& config, Pid pid,
                                    const HeatParamsFn& params) {
  if (pid == self_) return {};
  auto info = read_process(paths_, pid);
  if (!info || info->cmdline.empty()) return {};  // gone, or a kernel thread
  auto group = config.group_of(*info);
  if (!group) return {};
  auto it = targets_.find(pid);
  if (it != targets_.end() && it->second.group == *group) return {.selected = true};
  if (it == targets_.end()) {
    spdlog::info("target {} ({}) joins group '{}'", pid, info->comm,
                 config.config.groups[*group].name);
  }
  Target t{.pid = pid, .group = *group, .comm = info->comm};
  t.heat = std::make_unique<policy::HeatTable>(params(*group));
  targets_[pid] = std::move(t);
  return {.selected = true, .changed = true};
}

bool TargetSet::rematch(const policy::CompiledConfig& config, const HeatParamsFn& params) {
  bool left = false;
  for (auto it = targets_.begin(); it != targets_.end();) {
    Target& t = it->second;
    auto info = read_process(paths_, t.pid);
    const auto group = info ? config.group_of(*info) : std::nullopt;
    if (!group) {
      spdlog::info("target {} ({}) is no longer selected", t.pid, t.comm);
      it = targets_.erase(it);
      left = true;
      continue;
    }
    t.group = *group;
    // Heat is the process's, whatever its group; only a table whose decay no
    // longer matches the group's half-life, or whose granularity no longer
    // matches the sources (pages or DAMON regions), starts again.
    const auto p = params(*group);
    if (t.heat->decay().half_life() != p.half_life || t.heat->granularity() != p.granularity) {
      t.heat = std::make_unique<policy::HeatTable>(p);
      t.vmas.clear();
      t.history.clear();
      t.last_full_residency = 0;
    }
    ++it;
  }
  return left;
}

void TargetSet::track_vmas(TimeNs now, std::uint64_t host_bytes) {
  std::map<Pid, std::vector<MapEntry>> maps;
  for (auto& [pid, t] : targets_) {
    auto m = read_maps(paths_, pid);
    if (!m) continue;  // gone: discover() drops it next step
    t.threads = read_thread_count(paths_, pid).value_or(0);
    note_cpu_time(t, read_cpu_time(paths_, pid), now);
    maps.emplace(pid, std::move(*m));
  }
  pools_->update(maps, kMinVmaBytes);
  for (auto& [pid, entries] : maps) {
    Target& t = targets_.at(pid);
    const TrackedVmas picked = pick_vmas(entries, host_bytes, *pools_, pid);
    if (picked.skipped_bytes > 0 && !t.said_reservations) {
      t.said_reservations = true;
      spdlog::warn(
          "target {} ({}): {} of anonymous mappings not tracked: more than the host's {} of "
          "memory (reservations, never all resident)",
          pid, t.comm, policy::format_size(picked.skipped_bytes), policy::format_size(host_bytes));
    }
    for (const auto& r : subtract(t.vmas, picked.vmas)) t.heat->untrack(r);
    const auto added = subtract(picked.vmas, t.vmas);
    for (const auto& r : added) t.heat->track(r, -1, now);
    // New mappings' pages have no node yet: the residency phase reads them all.
    t.reread.insert(t.reread.end(), added.begin(), added.end());
    t.vmas = picked.vmas;
    t.borrowed = pools_->borrowed(pid);
  }
}

const Target* TargetSet::find(Pid pid) const {
  auto it = targets_.find(pid);
  return it == targets_.end() ? nullptr : &it->second;
}

Target* TargetSet::find(Pid pid) {
  auto it = targets_.find(pid);
  return it == targets_.end() ? nullptr : &it->second;
}

std::vector<Pid> TargetSet::pids() const {
  std::vector<Pid> out;
  out.reserve(targets_.size());
  for (const auto& [pid, t] : targets_) out.push_back(pid);
  return out;
}

}  // namespace kvtier::agent
