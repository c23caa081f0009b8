#include "agent/loop/pinned_tracker.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "agent/host/host_paths.hpp"
#include "agent/host/pinned_memory.hpp"
#include "agent/loop/target_set.hpp"
#include "agent/telemetry/telemetry.hpp"
#include "policy/config.hpp"
#include "policy/types.hpp"

namespace kvtier::agent {

void refresh_pinned(TargetSet& targets, const HostPaths& paths, TimeNs now) {
  for (auto& [pid, t] : targets.all()) {
    const bool remapped = t.vmas != t.pinned_vmas;
    if (remapped) {
      t.pinned.mapping_changed();
      t.pinned_vmas = t.vmas;
    }
    if (remapped || t.pinned_read_at == 0 || now - t.pinned_read_at >= kPinnedReadEvery) {
      t.pinned_read_at = now;
      auto pm = read_pinned_memory(paths, pid);
      if (pm) {
        t.vm_pin_bytes = pm->vm_pin_bytes;
        t.pinned.set_registered(pm->registered, now);
      } else if (pm.error().code != ESRCH) {
        spdlog::debug("pinned memory of pid {}: {}", pid, pm.error().message);
      }
    }
    t.pinned.expire(now);
  }
}

void note_refused(TargetSet& targets, const std::vector<std::pair<Pid, AddrRange>>& refused,
                  TimeNs now) {
  std::map<Pid, std::vector<AddrRange>> by_pid;
  for (const auto& [pid, r] : refused) by_pid[pid].push_back(r);
  for (const auto& [pid, ranges] : by_pid) {
    if (Target* t = targets.find(pid)) t->pinned.refused(ranges, now);
  }
}

std::map<int, std::uint64_t> pinned_bytes_per_node(const Target& t, TimeNs now) {
  std::map<int, std::uint64_t> out;
  for (const AddrRange& r : t.pinned.active()) {
    for (std::uint64_t a = r.start; a < r.end;) {
      const auto u = t.heat->at(a, now);
      if (!u || u->range.end <= a) {
        out[-1] += std::min(kPageSize, r.end - a);
        a += kPageSize;
        continue;
      }
      const std::uint64_t end = std::min(u->range.end, r.end);
      out[u->node] += end - a;
      a = end;
    }
  }
  return out;
}

void export_pinned(const TargetSet& targets, std::span<const policy::GroupConfig> groups,
                   TimeNs now, Telemetry& telemetry) {
  std::map<std::pair<std::size_t, int>, std::uint64_t> sum;
  for (const auto& [pid, t] : targets.all()) {
    for (const auto& [node, bytes] : pinned_bytes_per_node(t, now)) sum[{t.group, node}] += bytes;
  }
  telemetry.clear("kvtier_pinned_bytes");
  for (const auto& [key, bytes] : sum) {
    const std::string group = key.first < groups.size() ? groups[key.first].name : "";
    const std::string node = key.second >= 0 ? std::to_string(key.second) : "none";
    telemetry.set("kvtier_pinned_bytes", {{"group", group}, {"node", node}},
                  static_cast<double>(bytes));
  }
}

std::uint64_t pinned_bytes(const Target& t) {
  return std::max(t.pinned.bytes(), t.vm_pin_bytes.value_or(0));
}

}  // namespace kvtier::agent
