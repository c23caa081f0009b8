#include "agent/loop/promotion_tick.hpp"

#include <cstddef>
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <vector>
#include "agent/loop/target_set.hpp"
#include "agent/telemetry/telemetry.hpp"
#include "policy/planner.hpp"
#include "policy/types.hpp"

namespace kvtier::agent {

std::vector<policy::PromotionCandidate> PromotionTick::candidates(const policy::Snapshot& snap,
                                                                  TimeNs now,
                                                                  Telemetry& telemetry) {
  std::vector<policy::PromotionCandidate> cands;
  for (std::size_t i = 0; i < snap.targets.size(); ++i) {
    Target* t = s_.targets.find(snap.targets[i].pid);
    if (!t->touched_pages.empty()) {
      std::string error;
      residency_.refresh_touched(*t, now, &error);
    }
    feedback_.take_heat_events(*t, now, telemetry);
    for (const auto& [addr, first] : t->first_slow_touch) {
      if (auto u = t->heat->at(addr, now)) cands.push_back({.target = i, .unit = *u});
    }
  }
  return cands;
}

std::vector<policy::PromotionCandidate> PromotionTick::spare_units(
    const policy::Snapshot& snap, std::span<const policy::PromotionCandidate> cands, TimeNs now,
    bool* spent) {
  std::uint64_t reach = 0;
  for (const auto& c : cands) reach += 2 * c.unit.range.bytes();
  const auto& limits = s_.config.config.limits;
  for (const auto& n : s_.topology.nodes) {
    if (n.has_cpus()) {
      reach += limits.min_free + static_cast<std::uint64_t>(limits.dram_headroom *
                                                            static_cast<double>(n.mem_total_bytes));
    }
  }
  std::map<Pid, std::size_t> index;
  for (std::size_t i = 0; i < snap.targets.size(); ++i) index[snap.targets[i].pid] = i;
  std::vector<policy::PromotionCandidate> out;
  std::uint64_t bytes = 0;
  std::erase_if(s_.spare, [&](const policy::SpareUnit& su) {
    if (bytes >= reach) return false;
    auto it = index.find(su.pid);
    if (it == index.end()) return true;
    const Target* t = s_.targets.find(su.pid);
    auto u = t->heat->at(su.addr, now);
    if (!u || u->node != su.node) return true;
    bytes += u->range.bytes();
    out.push_back({.target = it->second, .unit = *u});
    return false;
  });
  *spent = bytes < reach;
  return out;
}

}  // namespace kvtier::agent
