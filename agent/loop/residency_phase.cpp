#include "agent/loop/residency_phase.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "agent/host/residency.hpp"
#include "agent/loop/feedback.hpp"
#include "agent/loop/residency_check.hpp"
#include "agent/loop/target_set.hpp"
#include "agent/sources/return_watch.hpp"
#include "agent/telemetry/telemetry.hpp"
#include "policy/heat.hpp"
#include "policy/rules.hpp"
#include "policy/types.hpp"

namespace kvtier::agent {
namespace {

// Sorted, coalesced page ranges of some page addresses.
std::vector<AddrRange> page_runs(std::vector<std::uint64_t>& pages) {
  std::ranges::sort(pages);
  std::vector<AddrRange> out;
  for (const std::uint64_t p : pages) {
    if (!out.empty() && out.back().end >= p) {
      out.back().end = std::max(out.back().end, p + kPageSize);
    } else {
      out.push_back({p, p + kPageSize});
    }
  }
  return out;
}

}  // namespace

void ResidencyPhase::read(TimeNs now, Telemetry& telemetry, ReturnWatch* watch) {
  std::map<Pid, std::map<int, std::uint64_t>> residency;
  for (auto& [pid, t] : s_.targets.all()) {
    const bool full = t.last_full_residency == 0;
    const bool check = !full && now >= t.last_full_residency + kFullResidencyEvery;
    const bool some = check || (!full && !t.reread.empty());
    std::string error;
    if (full) {
      read_full(t, now, watch, &error);
    } else if (some || !t.touched_pages.empty()) {
      if (some) read_some(t, now, check, watch, &error);
      // The pages sampled since the last read may have moved (the kernel's
      // promotions); kvtier's own moves are counted as they happen (Dispatcher).
      if (!t.touched_pages.empty()) refresh_touched(t, now, &error);
      t.bytes_per_node = t.heat->bytes_per_node(&t.not_present_bytes);
    }
    t.touched_pages.clear();
    // Gone or not allowed: what was read counts; discover() drops it next step.
    if (!error.empty()) spdlog::debug("residency of {}: {}", pid, error);
    if (t.heat->granularity() == policy::Granularity::kRegion) t.heat->compact(now);
    residency[pid] = t.bytes_per_node;
    feedback_.take_heat_events(t, now, telemetry);
  }
  telemetry.set_residency(residency);
}

// Every tracked page's node. Whatever sits on a slow node is watched, not only
// what kvtier demoted: blocks the kernel placed there when DRAM was full are
// read back as soon.
void ResidencyPhase::read_full(Target& t, TimeNs now, ReturnWatch* watch, std::string* error) {
  t.reread.clear();
  t.kernel_moves_at_check = kernel_moves(host_);
  PageMap map = reader_.map(t.pid, t.vmas, error);
  recorder_.residency(t.pid, true, map, now);
  for (const auto& run : map.runs) t.heat->set_node(run.range, run.node);
  if (watch != nullptr) arm_slow(t, map, *watch);
  t.heat->set_huge_blocks(map.huge_blocks);
  t.bytes_per_node = std::move(map.bytes_per_node);
  t.not_present_bytes = map.not_present_bytes;
  t.huge_blocks = std::move(map.huge_blocks);
  t.last_full_residency = now;
}

void ResidencyPhase::read_some(Target& t, TimeNs now, bool check, ReturnWatch* watch,
                               std::string* error) {
  const PageMap map = update_residency(reader_, t, now, check, s_.steps,
                                       check ? kernel_moves(host_) : std::nullopt, error);
  recorder_.residency(t.pid, check, map, now);
  // A check arms what the table has on a slow node, as the full read did.
  if (watch != nullptr) arm_slow(t, check ? table_runs(*t.heat, now) : map, *watch);
  if (check) t.last_full_residency = now;
}

void ResidencyPhase::arm_slow(const Target& t, const PageMap& map, ReturnWatch& watch) const {
  const policy::NodeFacts facts(s_.topology);
  std::vector<AddrRange> slow;
  for (const auto& run : map.runs) {
    if (run.node >= 0 && slow_for(s_, facts, t.group, run.node)) slow.push_back(run.range);
  }
  watch.arm(t.pid, slow);
}

void ResidencyPhase::refresh_touched(Target& t, TimeNs now, std::string* error) {
  const std::vector<AddrRange> ranges = page_runs(t.touched_pages);
  t.touched_pages.clear();
  PageMap map = reader_.nodes(t.pid, ranges, error);
  recorder_.residency(t.pid, false, map, now);
  for (const auto& run : map.runs) {
    if (run.node >= 0) t.heat->set_node(run.range, run.node);
  }
}

}  // namespace kvtier::agent
