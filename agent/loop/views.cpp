#include "agent/loop/views.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "agent/host/clock.hpp"
#include "agent/host/self_memory.hpp"
#include "agent/loop/kernel_refusals.hpp"
#include "agent/loop/loop_state.hpp"
#include "agent/loop/pinned_tracker.hpp"
#include "agent/loop/target_set.hpp"
#include "agent/sources/return_watch.hpp"
#include "policy/config.hpp"
#include "policy/error.hpp"
#include "policy/heat.hpp"
#include "policy/heat_state.hpp"
#include "policy/rules.hpp"
#include "policy/topology.hpp"
#include "policy/types.hpp"
#include "policy/units.hpp"

namespace kvtier::agent {
namespace {

using nlohmann::json;

double seconds(TimeNs ns) {
  return static_cast<double>(ns) / 1e9;
}

TimeNs idle_of(const policy::HeatUnit& u, TimeNs now) {
  const TimeNs last = policy::from_tick(u.last_access);
  return now > last ? now - last : 0;
}

Result<const Target*> target_of(const LoopState& s, Pid pid) {
  const Target* t = s.targets.find(pid);
  if (t == nullptr) {
    return fail(fmt::format("pid {} is not a target (see kvtierctl targets)", pid), ESRCH);
  }
  return t;
}

std::string source_names(const LoopState& s, std::string_view none) {
  std::string names;
  for (const auto& src : s.sources) {
    if (!src.standby.empty()) continue;
    names += (names.empty() ? "" : "+") + std::string(policy::source_name(src.kind));
  }
  return names.empty() ? std::string(none) : names;
}

json sources_json(const LoopState& s) {
  json out = json::array();
  for (const auto& src : s.sources) {
    out.push_back({{"name", policy::source_name(src.kind)},
                   {"reason", src.reason},
                   {"started", src.started},
                   {"standby", src.standby},
                   {"pids", src.pids},
                   {"error", src.error}});
  }
  return out;
}

json plan_json(const Plan& plan, bool full) {
  json out = {{"moves", plan.moves.size()},
              {"demote_bytes", plan.demote_bytes},
              {"promote_bytes", plan.promote_bytes},
              {"notes", plan.notes}};
  if (!full) return out;
  json moves = json::array();
  for (const auto& m : plan.moves) {
    moves.push_back({{"pid", m.pid},
                     {"start", m.range.start},
                     {"end", m.range.end},
                     {"from", m.from_node},
                     {"to", m.to_node},
                     {"heat", m.heat},
                     {"why", m.why}});
  }
  out["detail"] = moves;
  return out;
}

// Hot: accessed within the group's effective cold age (what kvtier keeps in
// DRAM); idle: not accessed for its configured cold_age (what it may demote).
TimeNs hot_window(const LoopState& s, std::size_t group) {
  const auto& pol = s.config.config.groups[group].policy;
  const TimeNs eff = group < s.feedback.size() ? s.feedback[group].tuner.effective() : 0;
  return std::max(pol.cold_age.value_or(0), eff);
}

json target_json(const LoopState& s, const Target& t, TimeNs now) {
  json nodes = json::object();
  for (const auto& [node, bytes] : t.bytes_per_node) nodes[fmt::format("{}", node)] = bytes;
  const auto& pol = s.config.config.groups[t.group].policy;
  const TimeNs window = hot_window(s, t.group);
  std::uint64_t hot = 0;
  std::uint64_t idle = 0;
  std::map<int, std::uint64_t> hot_by_node;
  double heat_sum = 0;
  t.heat->for_each_unit(now, [&](const policy::HeatUnit& u) {
    heat_sum += u.heat * static_cast<double>(u.range.bytes()) / static_cast<double>(kPageSize);
    if (window > 0 && idle_of(u, now) < window) {
      hot += u.range.bytes();
      if (u.node >= 0) hot_by_node[u.node] += u.range.bytes();  // not resident: no node
    }
    // Resident pages only: a reservation never touched is idle address space, not memory.
    if (u.node >= 0 && pol.cold_age && idle_of(u, now) >= *pol.cold_age) {
      idle += u.range.bytes();
    }
  });
  std::uint64_t resident = 0;
  for (const auto& [node, bytes] : t.bytes_per_node) {
    if (node >= 0) resident += bytes;
  }
  json hot_nodes = json::object();
  for (const auto& [node, bytes] : hot_by_node) hot_nodes[fmt::format("{}", node)] = bytes;
  return {{"pid", t.pid},
          {"comm", t.comm},
          {"threads", t.threads},
          {"dram_reads_unseen", s.dram_reads_unseen(t)},
          {"scan_blind", t.scan_blind},
          {"scan_interval_s", static_cast<double>(t.scan_interval) / 1e9},
          {"group", s.config.config.groups[t.group].name},
          {"tracked_bytes", t.heat->tracked_bytes()},
          {"resident_bytes", resident},
          {"heat_state_bytes", t.heat->memory_bytes()},
          {"resident_bytes_per_node", nodes},
          {"not_present_bytes", t.not_present_bytes},
          {"hot_bytes", hot},
          {"hot_bytes_per_node", hot_nodes},
          {"idle_bytes", idle},
          {"accesses_per_s", heat_sum},
          {"planned_moves", t.last_moves.size()},
          {"pinned_bytes", t.pinned.bytes()},
          {"pinned_by", t.pinned.sources()},
          {"vm_pin_bytes", t.vm_pin_bytes ? json(*t.vm_pin_bytes) : json(nullptr)},
          {"moved_pages", t.moved.moved},
          {"moved_bytes", t.moved.bytes_moved}};
}

// Most of a target's resident memory long-term pinned: kvtier can do little for it.
void pinned_line(const Target& t, std::vector<std::string>& out) {
  std::uint64_t resident = 0;
  for (const auto& [node, bytes] : t.bytes_per_node) {
    if (node >= 0) resident += bytes;
  }
  const std::uint64_t pinned = pinned_bytes(t);
  if (resident == 0 || 2 * pinned <= resident) return;
  const std::string by = t.pinned.sources();
  out.push_back(fmt::format(
      "target {} ({}): {} MiB of its {} MiB resident are long-term pinned ({}): not movable; "
      "see docs/gpu-servers.md",
      t.pid, t.comm, pinned >> 20, resident >> 20, by.empty() ? "VmPin" : by));
}

}  // namespace

json activity_json(const LoopState& s, TimeNs now) {
  std::uint64_t bytes = 0;
  std::uint64_t moves = 0;
  for (const auto& [at, b] : s.recent_moves) {
    if (at + LoopState::kMoveWindow <= now) continue;
    bytes += b;
    ++moves;
  }
  return {{"moves_last_minute", moves},
          {"moved_bytes_last_minute", bytes},
          {"last_move_seconds_ago", s.last_move_at == 0
                                        ? json(nullptr)
                                        : json(static_cast<double>(now - s.last_move_at) / 1e9)}};
}

std::vector<std::string> pinned_lines(const LoopState& s) {
  std::vector<std::string> out;
  for (const auto& [pid, t] : s.targets.all()) pinned_line(t, out);
  return out;
}

std::string scan_interval_words(TimeNs interval) {
  constexpr TimeNs kHour = TimeNs{3600} * 1'000'000'000;
  if (interval >= kHour) return "less than once an hour";
  return fmt::format("about every {:.0f} s", static_cast<double>(interval) / 1e9);
}

// The sources the kernel refused, and why (kernel_refusals.hpp).
json refused_sources_json(const LoopState& s) {
  json out = json::array();
  for (const auto& r : s.refused_sources) {
    out.push_back({{"source", policy::source_name(r.kind)}, {"why", r.why}});
  }
  return out;
}

std::vector<std::string> degraded_lines(const LoopState& s, TimeNs now) {
  std::vector<std::string> out;
  if (s.mover.empty()) {
    out.push_back(
        fmt::format("observe-only: {}", s.observe_reason.empty() ? "no mover" : s.observe_reason));
  }
  if (s.sources.empty()) out.emplace_back("no hotness source: heat is unknown, nothing is demoted");
  refused_source_lines(s.refused_sources, source_names(s, ""), out);
  for (const auto& src : s.sources) {
    if (!src.error.empty()) {
      out.push_back(fmt::format("source {} failed: {}", policy::source_name(src.kind), src.error));
    }
  }
  if (!s.process_watcher && !s.discovery.empty()) {
    out.push_back(fmt::format("targets found by {}: new ones wait for the next step", s.discovery));
  }
  if (!s.tiering_error.empty())
    out.push_back(fmt::format("tiering knobs not set: {}", s.tiering_error));
  // With normal NUMA balancing on, the faults source counts on the kernel's scan
  // to unmap every page now and then; for a single-threaded process it skips
  // the pages on the node the process runs on (mm/mprotect.c), so reads there
  // cause no hint fault and such a page looks idle from its last fault or write.
  for (const auto& [pid, t] : s.targets.all()) {
    if (!s.dram_reads_unseen(t)) continue;
    out.push_back(fmt::format(
        "target {} ({}) is single-threaded: the kernel's NUMA scan leaves its pages on the "
        "node it runs on mapped, so its reads there cause no hint fault; they look idle from "
        "their last fault or write, and the cold-age pass waits twice cold_age for them while "
        "DRAM has room to spare",
        pid, t.comm));
  }
  for (const auto& [pid, t] : s.targets.all()) {
    if (!t.scan_blind) continue;
    out.push_back(fmt::format(
        "target {} ({}): the kernel's NUMA scan goes through it {} (it runs little, and is "
        "scanned per its own CPU time), so hint faults miss its reads: DAMON and the dirty scan "
        "watch it",
        pid, t.comm, scan_interval_words(t.scan_interval)));
  }
  for (const auto& [node, lost] : s.lost_targets) {
    out.push_back(fmt::format(
        "node {} is no longer a demotion target ({}) for {:.0f} s: nothing is demoted there; "
        "see docs/troubleshoot.md",
        node, lost.reason, static_cast<double>(now - lost.since) / 1e9));
  }
  if (s.full_node >= 0 && s.full_at + LoopState::kMoveWindow > now) {
    out.push_back(fmt::format("node {} full: a demotion there found no free memory {:.0f} s ago",
                              s.full_node, static_cast<double>(now - s.full_at) / 1e9));
  }
  s.move_refusals.lines(now, out);
  return out;
}

// Where kvtierd's CPU time went: the loop thread's by phase, and the whole
// process's (the sources' threads, the control socket, the exporter too).
json cpu_json(const LoopState& s) {
  json phases = json::object();
  double loop = 0.0;
  for (std::size_t i = 0; i < kLoopPhases; ++i) {
    const double sec = static_cast<double>(s.cpu[i]) / 1e9;
    phases[kLoopPhaseNames[i]] = sec;
    loop += sec;
  }
  return {{"loop_seconds", loop},
          {"loop_seconds_by_phase", phases},
          {"process_seconds", process_cpu_seconds()}};
}

// The demotion targets now, the ones lost (since when, why), the changes seen.
json topology_json(const LoopState& s, TimeNs now) {
  json targets = json::array();
  for (const auto& role : policy::classify_nodes(s.topology)) {
    if (role.demotion_target) targets.push_back(role.node);
  }
  json lost = json::array();
  for (const auto& [node, l] : s.lost_targets) {
    lost.push_back({{"node", node},
                    {"reason", l.reason},
                    {"seconds", static_cast<double>(now - l.since) / 1e9}});
  }
  return {{"demotion_targets", targets}, {"lost_targets", lost}, {"changes", s.topology_changes}};
}

json describe(const LoopState& s, bool full, TimeNs now) {
  std::string error;
  for (const auto& src : s.sources) {
    if (error.empty()) error = src.error;
  }
  std::string reasons;
  for (const auto& src : s.sources) reasons += (reasons.empty() ? "" : "; ") + src.reason;
  return {{"config", s.config.config.file},
          {"source", s.sources.empty() ? json(nullptr) : json(source_names(s, ""))},
          {"source_reason", reasons},
          {"source_error", error},
          {"sources", sources_json(s)},
          {"refused_sources", refused_sources_json(s)},
          {"mover", s.mover.empty() ? json(nullptr) : json(s.mover)},
          {"observe_only", s.mover.empty()},
          {"observe_reason", s.observe_reason},
          {"tiering", tiering_json(s)},
          {"budget_bytes", s.budget_bytes},
          {"steps", s.steps},
          {"targets", targets_json(s, now)},
          {"last_plan", plan_json(s.last_plan, full)},
          {"moved_pages_total", s.moved_total.moved},
          {"moved_bytes_total", s.moved_total.bytes_moved},
          {"activity", activity_json(s, now)},
          {"cpu", cpu_json(s)},
          {"memory", {{"resident_bytes", resident_bytes()}}},
          {"discovery",
           {{"how", s.discovery},
            {"process_events", s.process_events},
            {"rescan_corrections", s.rescan_corrections}}},
          {"degraded", degraded_lines(s, now)},
          {"topology", topology_json(s, now)},
          {"pinned", pinned_lines(s)},
          {"placement", feedback_json(s)}};
}

std::map<int, std::uint64_t> hot_bytes_per_node(const LoopState& s, TimeNs now) {
  std::map<int, std::uint64_t> out;
  for (const auto& [pid, t] : s.targets.all()) {
    const TimeNs window = hot_window(s, t.group);
    if (window == 0) continue;
    // A chunk whose parts (the pages that share a node and flags) are each all within
    // the window or all out of it, by their bounds, is counted at once.
    const auto idle = [now](std::uint32_t tick) {
      return idle_of(policy::HeatUnit{.last_access = tick}, now);
    };
    const auto counted = [](const policy::PagePack::Part& part) {
      return (part.flags & policy::HeatState::kTracked) != 0 && part.node >= 0;
    };
    const auto whole = [&](std::uint64_t, const policy::PagePack& p) {
      bool known = true;
      p.for_each_part([&](const policy::PagePack::Part& part) {
        known = known && (!counted(part) || idle(part.earliest_access) < window ||
                          idle(part.latest_bound) >= window);
      });
      if (!known) return false;
      p.for_each_part([&](const policy::PagePack::Part& part) {
        if (counted(part) && idle(part.earliest_access) < window) {
          out[part.node] += std::uint64_t{part.pages} * kPageSize;
        }
      });
      return true;
    };
    t.heat->for_each_run(
        now,
        [&](const policy::HeatUnit& u, std::uint64_t n) {
          if (u.node >= 0 && idle_of(u, now) < window) out[u.node] += n * u.range.bytes();
        },
        whole);
  }
  return out;
}

static json return_watch_json(const LoopState& s) {
  if (!s.return_watch) return nullptr;
  const ReturnWatchStats& w = *s.return_watch;
  return {{"chunk_bytes", ReturnWatch::chunk_bytes()},
          {"armed", w.armed},
          {"returns", w.returns},
          {"disarmed", w.disarmed},
          {"failed", w.failed}};
}

json tiering_json(const LoopState& s) {
  const auto v = [](const std::optional<std::uint64_t>& x) { return x ? json(*x) : json(nullptr); };
  return {{"changed", s.tiering_changes},
          {"error", s.tiering_error},
          {"numa_balancing", v(s.tiering.numa_balancing)},
          {"tiering_mode", s.tiering.tiering()},
          {"hot_threshold_ms", v(s.tiering.hot_threshold_ms)},
          {"scan_period_min_ms", v(s.tiering.scan_period_min_ms)},
          {"scan_period_max_ms", v(s.tiering.scan_period_max_ms)},
          {"scan_size_mb", v(s.tiering.scan_size_mb)},
          {"promote_rate_limit_mbps", v(s.tiering.promote_rate_limit_mbps)},
          {"hint_faults_per_sec",
           s.scan_pacing.faults_per_sec ? json(*s.scan_pacing.faults_per_sec) : json(nullptr)},
          {"scan_period_paced", s.scan_pacing.period.has_value()},
          {"return_watch", return_watch_json(s)}};
}

json feedback_json(const LoopState& s) {
  json out = json::array();
  for (std::size_t g = 0; g < s.feedback.size(); ++g) {
    const GroupFeedback& f = s.feedback[g];
    out.push_back({{"group", s.config.config.groups[g].name},
                   {"effective_cold_age_s", static_cast<double>(f.tuner.effective()) / 1e9},
                   {"misdemotion_ratio", f.tuner.ratio()},
                   {"window_demoted_bytes", f.tuner.window_demoted()},
                   {"window_misdemoted_bytes", f.tuner.window_misdemoted()},
                   {"demoted_bytes", f.demoted_bytes},
                   {"promoted_bytes", f.promoted_bytes},
                   {"kernel_promoted_bytes", f.kernel_promoted_bytes},
                   {"misdemoted_bytes", f.misdemoted_bytes},
                   {"reactivated_bytes", f.reactivated_bytes},
                   {"slow_tier_touches", f.slow_touches},
                   {"group_promotion",
                    {{"enabled", s.config.config.groups[g].policy.promote_groups},
                     {"on", f.group_rate.on()},
                     {"hit_rate", f.group_rate.rate()},
                     {"hit_rate_min", f.group_rate.min_rate()},
                     {"judged", f.group_rate.judged()},
                     {"promoted_bytes", f.group_promoted_bytes},
                     {"hit_bytes", f.group_hit_bytes},
                     {"wasted_bytes", f.group_wasted_bytes},
                     {"trials", f.group_trials},
                     {"shadow_trials", f.group_shadow_trials},
                     {"groups", f.groups_known},
                     {"memory_bytes", f.groups_memory_bytes}}}});
  }
  return out;
}

std::string summary(const LoopState& s) {
  std::uint64_t slow = 0;
  std::uint64_t total = 0;
  std::set<int> slow_nodes;
  for (const auto& role : policy::classify_nodes(s.topology)) {
    if (role.demotion_target) slow_nodes.insert(role.node);
  }
  for (const auto& [pid, t] : s.targets.all()) {
    for (const auto& [node, bytes] : t.bytes_per_node) {
      total += bytes;
      if (slow_nodes.contains(node)) slow += bytes;
    }
  }
  return fmt::format("{} targets, {} of {} on CXL, source {}{}", s.targets.size(),
                     policy::format_size(slow), policy::format_size(total), source_names(s, "none"),
                     s.mover.empty() ? ", observe-only" : "");
}

json targets_json(const LoopState& s, TimeNs now) {
  json out = json::array();
  for (const auto& [pid, t] : s.targets.all()) out.push_back(target_json(s, t, now));
  return out;
}

Result<json> explain(const LoopState& s, Pid pid, TimeNs now) {
  auto found = target_of(s, pid);
  if (!found) return std::unexpected(found.error());
  const Target& t = **found;
  const auto& group = s.config.config.groups[t.group];
  // The planner's rules: the group's effective cold age, and the target's evidence.
  const std::optional<TimeNs> cold_age = t.group < s.feedback.size()
                                             ? std::optional(s.feedback[t.group].tuner.effective())
                                             : std::nullopt;
  const policy::GroupRules rules(group, policy::NodeFacts(s.topology), now, cold_age);
  const bool unseen = s.dram_reads_unseen(t);
  json runs = json::array();
  json cur;
  t.heat->for_each_unit(now, [&](const policy::HeatUnit& u) {
    const std::string why =
        t.pinned.covers(u.range)
            ? fmt::format("long-term pinned ({}): not movable; see docs/gpu-servers.md",
                          t.pinned.how(u.range.start, now))
            : policy::explain_unit(rules, u, t.last_moves, unseen).why;
    if (!cur.is_null() && cur["end"] == u.range.start && cur["node"] == u.node &&
        cur["why"] == why && runs.size() < 100000) {
      cur["end"] = u.range.end;
      cur["max_heat"] = std::max(cur["max_heat"].get<double>(), static_cast<double>(u.heat));
      return;
    }
    if (!cur.is_null()) runs.push_back(cur);
    cur = {{"start", u.range.start},
           {"end", u.range.end},
           {"node", u.node},
           {"max_heat", static_cast<double>(u.heat)},
           {"idle_s", seconds(idle_of(u, now))},
           {"why", why}};
  });
  if (!cur.is_null()) runs.push_back(cur);
  return json{{"pid", pid}, {"comm", t.comm}, {"group", group.name}, {"ranges", runs}};
}

Result<json> heatmap(const LoopState& s, Pid pid, std::size_t bins, TimeNs now) {
  auto found = target_of(s, pid);
  if (!found) return std::unexpected(found.error());
  const Target& t = **found;
  json vmas = json::array();
  for (const auto& v : t.vmas) vmas.push_back({v.start, v.end});
  json history = json::array();
  for (const auto& row : t.history) history.push_back(row);
  return json{{"pid", pid},
              {"comm", t.comm},
              {"interval_s", seconds(s.config.config.daemon.interval)},
              {"vmas", vmas},
              {"now", bin_heat(t, bins, now)},
              {"history", history}};
}

// A chunk's heat at `tick` times 4 KiB, summed over its tracked pages. With a
// cache, a pack unchanged since its sum was taken (every page accessed by then)
// has had every page's heat decayed by the same factor since: the sum is aged
// by it, no page visited, and the row follows the chunks that changed.
static double chunk_heat_sum(std::uint64_t base, const policy::PagePack& p, std::uint32_t tick,
                             const policy::Decay& decay, HeatRowCache* cache, std::uint32_t row) {
  const auto walk = [&] {
    double sum = 0.0;
    p.for_each([&](std::size_t, const policy::HeatState& s) {
      if (s.tracked())
        sum += static_cast<double>(decay.heat_at(s, tick)) * static_cast<double>(kPageSize);
    });
    return sum;
  };
  if (cache == nullptr) return walk();
  auto [it, fresh] = cache->chunks.try_emplace(base);
  ChunkHeatSum& c = it->second;
  c.row = row;
  if (!fresh && c.version == p.version() && c.tick <= tick && p.latest_bound() <= c.tick) {
    return c.sum * static_cast<double>(decay.factor(tick - c.tick));
  }
  c = ChunkHeatSum{.version = p.version(), .tick = tick, .row = row, .sum = walk()};
  return c.sum;
}

std::vector<float> bin_heat(const Target& t, std::size_t bins, TimeNs now, HeatRowCache* cache) {
  std::uint64_t total = 0;
  for (const auto& v : t.vmas) total += v.bytes();
  std::vector<float> heat(bins, 0.0F);
  if (total == 0 || bins == 0) return heat;
  std::vector<double> weight(bins, 0.0);
  // Address -> offset in the concatenated tracked mappings, and the end of its mapping.
  auto offset_of =
      [&](std::uint64_t addr) -> std::optional<std::pair<std::uint64_t, std::uint64_t>> {
    std::uint64_t off = 0;
    for (const auto& v : t.vmas) {
      if (v.contains(addr)) return std::pair{off + (addr - v.start), v.end};
      off += v.bytes();
    }
    return std::nullopt;
  };
  // [lo, hi): addresses whose unit goes to bin `cur` (one mapping, one bin), so
  // that a unit there needs no search; a run of alike units goes in pieces.
  std::uint64_t lo = 0;
  std::uint64_t hi = 0;
  std::size_t cur = 0;
  // A chunk of pages with their own states wholly inside [lo, hi): its pages' heat in
  // order, as the units one by one would add it, without a unit or a division per page.
  const std::uint32_t tick = policy::to_tick(now);
  const policy::Decay& decay = t.heat->decay();
  constexpr auto kW = static_cast<double>(kPageSize);
  const std::uint32_t row = cache != nullptr ? ++cache->rows : 0;
  std::size_t packs = 0;
  const auto in_bin = [&](std::uint64_t base, const policy::PagePack& p) {
    if (base < lo || base + kHugePageSize > hi) return false;
    heat[cur] += static_cast<float>(chunk_heat_sum(base, p, tick, decay, cache, row));
    weight[cur] += kW * static_cast<double>(p.tracked_pages());
    ++packs;
    return true;
  };
  const auto unit = [&](const policy::HeatUnit& u, std::uint64_t n) {
    const std::uint64_t bytes = u.range.bytes();
    for (std::uint64_t i = 0; i < n;) {
      const std::uint64_t a = u.range.start + i * bytes;
      if (a < lo || a >= hi) {
        const auto at = offset_of(a);
        if (!at) {
          ++i;
          continue;
        }
        const auto [off, vma_end] = *at;
        cur = std::min<std::size_t>(bins - 1, off * bins / total);
        // The first offset of the next bin (the last bin runs to the end).
        const std::uint64_t next = cur + 1 == bins ? total : ((cur + 1) * total + bins - 1) / bins;
        lo = a;
        hi = a + std::min(next - off, vma_end - a);
      }
      const std::uint64_t m = std::clamp<std::uint64_t>((hi - a + bytes - 1) / bytes, 1, n - i);
      const auto w = static_cast<double>(bytes * m);
      heat[cur] += static_cast<float>(u.heat * w);
      weight[cur] += w;
      i += m;
    }
  };
  t.heat->for_each_run(now, unit, in_bin);
  if (cache != nullptr && cache->chunks.size() > 2 * packs + 1024) {
    std::erase_if(cache->chunks, [row](const auto& kv) { return kv.second.row != row; });
  }
  for (std::size_t b = 0; b < bins; ++b) {
    if (weight[b] > 0) heat[b] = static_cast<float>(heat[b] / weight[b]);
  }
  return heat;
}

}  // namespace kvtier::agent
