#include "agent/daemon/controller.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <set>
#include <utility>

#include "agent/procfs.hpp"
#include "agent/topology_reader.hpp"
#include "policy/planner.hpp"
#include "policy/units.hpp"

namespace kvtier::agent {
namespace {

using nlohmann::json;

constexpr std::size_t kQueryBatch = 4096;
constexpr std::size_t kHistoryBins = 64;
constexpr std::size_t kHistorySteps = 120;
constexpr std::int64_t kMaxBins = 4096;
// The kernel's PID_MAX_LIMIT (4 Mi), as the config's pid selector allows.
constexpr std::int64_t kMaxPid = 4194304;
// Mappings smaller than this are not worth tracking (stacks of threads,
// small heaps): the KV cache lives in large anonymous pools.
constexpr std::uint64_t kMinVmaBytes = 1ULL << 20;

double seconds(TimeNs ns) {
  return static_cast<double>(ns) / 1e9;
}

std::string node_key(int node) {
  return fmt::format("{}", node);
}

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

// Whether `addr` lies in one of `vmas` (sorted, disjoint).
bool in_tracked(const std::vector<AddrRange>& vmas, std::uint64_t addr) {
  auto it = std::ranges::upper_bound(vmas, addr, {}, &AddrRange::start);
  return it != vmas.begin() && std::prev(it)->contains(addr);
}

}  // namespace

Controller::Controller(policy::CompiledConfig config, ControllerDeps deps, TimeNs now)
    : config_(std::move(config)),
      deps_(std::move(deps)),
      bucket_(config_.config.limits.migrate_rate, config_.config.limits.migrate_burst, now) {}

Controller::~Controller() {
  shutdown();
}

void Controller::shutdown() {
  if (deps_.source && source_started_) {
    deps_.source->stop();
    source_started_ = false;
    spdlog::info("source {} stopped", deps_.source->name());
  }
}

policy::HeatParams Controller::heat_params(std::size_t group) const {
  const auto& cfg = config_.config;
  const bool regions = deps_.source && deps_.source->name() == "damon";
  return policy::HeatParams{
      .half_life = cfg.groups[group].policy.half_life,
      .granularity = regions ? policy::Granularity::kRegion : policy::Granularity::kPage,
      .region_interval = cfg.sources.damon_aggr_interval};
}

void Controller::apply_config(policy::CompiledConfig config) {
  config_ = std::move(config);
  bucket_ = policy::TokenBucket(config_.config.limits.migrate_rate,
                                config_.config.limits.migrate_burst, 0);
  // Re-match now rather than at the next step: until then `status`, `targets`
  // and `explain` index the new config's groups with each target's group.
  for (auto it = targets_.begin(); it != targets_.end();) {
    Target& t = it->second;
    auto info = read_process(deps_.paths, t.pid);
    const auto group = info ? config_.group_of(*info) : std::nullopt;
    if (!group) {
      spdlog::info("target {} ({}) is no longer selected", t.pid, t.comm);
      it = targets_.erase(it);
      targets_changed_ = true;
      continue;
    }
    t.group = *group;
    // Heat is the process's, whatever its group; only a table whose decay no
    // longer matches the group's half-life starts again (tracked next step).
    const auto params = heat_params(*group);
    if (t.heat->decay().half_life() != params.half_life) {
      t.heat = std::make_unique<policy::HeatTable>(params);
      t.vmas.clear();
      t.history.clear();
    }
    ++it;
  }
}

Result<void> Controller::discover(TimeNs now) {
  std::set<Pid> seen;
  bool changed = std::exchange(targets_changed_, false);
  for (Pid pid : list_pids(deps_.paths)) {
    if (pid == deps_.self) continue;
    auto info = read_process(deps_.paths, pid);
    if (!info || info->cmdline.empty()) continue;  // gone, or a kernel thread
    auto group = config_.group_of(*info);
    if (!group) continue;
    seen.insert(pid);
    auto it = targets_.find(pid);
    if (it != targets_.end() && it->second.group == *group) continue;
    if (it == targets_.end()) {
      spdlog::info("target {} ({}) joins group '{}'", pid, info->comm,
                   config_.config.groups[*group].name);
    }
    Target t{.pid = pid, .group = *group, .comm = info->comm};
    t.heat = std::make_unique<policy::HeatTable>(heat_params(*group));
    targets_[pid] = std::move(t);
    changed = true;
  }
  for (auto it = targets_.begin(); it != targets_.end();) {
    if (seen.contains(it->first)) {
      ++it;
      continue;
    }
    spdlog::info("target {} ({}) is gone", it->first, it->second.comm);
    it = targets_.erase(it);
    changed = true;
  }
  if (deps_.source && (changed || !source_started_)) {
    if (!source_started_) {
      if (auto ok = deps_.source->start(); !ok) {
        source_error_ = ok.error().message;
        return fail(fmt::format("source {}: {}", deps_.source->name(), ok.error().message),
                    ok.error().code);
      }
      source_started_ = true;
      source_error_.clear();
      spdlog::info("source {} started: {}", deps_.source->name(), deps_.source_reason);
    }
    std::vector<Pid> pids;
    pids.reserve(targets_.size());
    for (const auto& [pid, t] : targets_) pids.push_back(pid);
    if (auto ok = deps_.source->set_targets(pids); !ok) {
      source_error_ = ok.error().message;
      return fail(fmt::format("source {}: {}", deps_.source->name(), ok.error().message),
                  ok.error().code);
    }
  }
  (void)now;
  return {};
}

void Controller::track_vmas(Target& t, TimeNs now) {
  auto maps = read_maps(deps_.paths, t.pid);
  if (!maps) return;  // gone: discover() drops it next step
  // Residency is read page by page every step, so what is tracked must stay
  // within what the host could hold: a mapping larger than all its memory is
  // a reservation (an allocator's arena, a sanitizer's shadow), mostly never
  // touched, and any process can make one of many terabytes for free.
  std::uint64_t host_bytes = 0;
  for (const auto& n : topology_.nodes) host_bytes += n.mem_total_bytes;
  std::vector<AddrRange> vmas;
  std::uint64_t tracked = 0;
  std::uint64_t skipped = 0;
  for (const auto& e : *maps) {
    if (!is_movable_anon(e) || e.range.bytes() < kMinVmaBytes) continue;
    if (host_bytes > 0 && tracked + e.range.bytes() > host_bytes) {
      skipped += e.range.bytes();
      continue;
    }
    tracked += e.range.bytes();
    vmas.push_back(e.range);
  }
  if (skipped > 0 && !t.said_reservations) {
    t.said_reservations = true;
    spdlog::warn(
        "target {} ({}): {} of anonymous mappings not tracked: more than the host's {} of memory "
        "(reservations, never all resident)",
        t.pid, t.comm, policy::format_size(skipped), policy::format_size(host_bytes));
  }
  for (const auto& r : subtract(t.vmas, vmas)) t.heat->untrack(r);
  for (const auto& r : subtract(vmas, t.vmas)) t.heat->track(r, -1, now);
  t.vmas = std::move(vmas);
}

void Controller::read_residency(Target& t) {
  t.bytes_per_node.clear();
  t.not_present_bytes = 0;
  for (const auto& vma : t.vmas) {
    std::uint64_t addr = vma.start;
    std::uint64_t run_start = addr;
    int run_node = -2;
    auto flush = [&](std::uint64_t end) {
      if (run_node != -2 && end > run_start) {
        t.heat->set_node({run_start, end}, run_node);
        if (run_node >= 0) {
          t.bytes_per_node[run_node] += end - run_start;
        } else {
          t.not_present_bytes += end - run_start;
        }
      }
    };
    while (addr < vma.end) {
      const std::size_t n = std::min<std::uint64_t>(kQueryBatch, (vma.end - addr) / kPageSize);
      addrs_.resize(n);
      status_.assign(n, 0);
      for (std::size_t i = 0; i < n; ++i) {
        addrs_[i] =
            reinterpret_cast<void*>(addr + i * kPageSize);  // NOLINT(performance-no-int-to-ptr)
      }
      const auto r = deps_.query(t.pid, addrs_, nullptr, status_, 0);
      if (r.ret < 0) return;  // gone or not allowed: nothing more to learn this step
      for (std::size_t i = 0; i < n; ++i) {
        const int node = status_[i] >= 0 ? status_[i] : -1;
        if (node != run_node) {
          flush(addr + i * kPageSize);
          run_start = addr + i * kPageSize;
          run_node = node;
        }
      }
      addr += n * kPageSize;
    }
    flush(vma.end);
  }
}

std::vector<float> Controller::bin_heat(const Target& t, std::size_t bins, TimeNs now) const {
  std::uint64_t total = 0;
  for (const auto& v : t.vmas) total += v.bytes();
  std::vector<float> heat(bins, 0.0F);
  if (total == 0 || bins == 0) return heat;
  std::vector<double> weight(bins, 0.0);
  // Address -> offset in the concatenated tracked mappings.
  auto offset_of = [&](std::uint64_t addr) -> std::optional<std::uint64_t> {
    std::uint64_t off = 0;
    for (const auto& v : t.vmas) {
      if (v.contains(addr)) return off + (addr - v.start);
      off += v.bytes();
    }
    return std::nullopt;
  };
  t.heat->for_each_unit(now, [&](const policy::HeatUnit& u) {
    auto off = offset_of(u.range.start);
    if (!off) return;
    const auto b = std::min<std::size_t>(bins - 1, *off * bins / total);
    const auto w = static_cast<double>(u.range.bytes());
    heat[b] += static_cast<float>(u.heat * w);
    weight[b] += w;
  });
  for (std::size_t b = 0; b < bins; ++b) {
    if (weight[b] > 0) heat[b] = static_cast<float>(heat[b] / weight[b]);
  }
  return heat;
}

void Controller::record_history(Target& t, TimeNs now) {
  t.history.push_back(bin_heat(t, kHistoryBins, now));
  while (t.history.size() > kHistorySteps) t.history.pop_front();
}

Result<void> Controller::step(const StepContext& ctx, Telemetry& telemetry) {
  const TimeNs now = ctx.now;
  ++steps_;
  auto topo = read_topology(deps_.paths);
  if (!topo) return std::unexpected(topo.error());
  topology_ = std::move(*topo);
  telemetry.set_node_memory(topology_);

  if (auto ok = discover(now); !ok) return ok;
  for (auto& [pid, t] : targets_) track_vmas(t, now);

  if (deps_.source && source_started_) {
    SourceBatch batch;
    if (auto ok = deps_.source->collect(now, batch); !ok) {
      source_error_ = ok.error().message;
      spdlog::warn("source {}: {}", deps_.source->name(), ok.error().message);
    }
    // Only what falls in tracked mappings counts: DAMON's regions span the
    // gaps between mappings and samples land on stacks and files, and heat
    // there would be tracked (and shown) but could never be moved.
    std::uint64_t used = 0;
    for (const auto& s : batch.samples) {
      auto it = targets_.find(s.pid);
      if (it == targets_.end() || !in_tracked(it->second.vmas, s.addr)) continue;
      it->second.heat->add(s);
      ++used;
    }
    for (const auto& r : batch.regions) {
      auto it = targets_.find(r.pid);
      if (it == targets_.end()) continue;
      bool any = false;
      for (const auto& v : it->second.vmas) {
        if (v.end <= r.range.start) continue;
        if (v.start >= r.range.end) break;
        RegionAccess part = r;
        part.range = {std::max(v.start, r.range.start), std::min(v.end, r.range.end)};
        it->second.heat->add(part);
        any = true;
      }
      if (any) ++used;
    }
    telemetry.record_source_batch(deps_.source->name(), batch.samples.size(), batch.regions.size());
    spdlog::debug("step {}: {} samples, {} regions, {} for targets", steps_, batch.samples.size(),
                  batch.regions.size(), used);
  }

  std::map<Pid, std::map<int, std::uint64_t>> residency;
  for (auto& [pid, t] : targets_) {
    read_residency(t);
    if (t.heat->granularity() == policy::Granularity::kRegion) t.heat->compact(now);
    residency[pid] = t.bytes_per_node;
    record_history(t, now);
  }
  telemetry.set_residency(residency);

  bucket_.refill(now);
  policy::Snapshot snap{.topology = &topology_,
                        .groups = config_.config.groups,
                        .limits = config_.config.limits,
                        .now = now,
                        .budget_bytes = bucket_.available()};
  // Without a hotness source every page looks idle: never demote blindly.
  const bool can_move = deps_.mover && deps_.source && source_started_ && !ctx.paused;
  for (const auto& [pid, t] : targets_) {
    snap.targets.push_back(policy::TargetView{.pid = pid, .group = t.group, .heat = t.heat.get()});
  }
  last_plan_ = policy::plan(snap);
  telemetry.record_plan(last_plan_);
  for (auto& [pid, t] : targets_) t.last_moves.clear();
  for (const auto& m : last_plan_.moves) {
    if (auto it = targets_.find(m.pid); it != targets_.end()) it->second.last_moves.push_back(m);
  }
  if (!can_move || last_plan_.moves.empty()) return {};

  // Consecutive moves of one target to one node go to the mover together.
  std::size_t i = 0;
  const auto& moves = last_plan_.moves;
  while (i < moves.size()) {
    std::size_t j = i;
    std::vector<AddrRange> ranges;
    while (j < moves.size() && moves[j].pid == moves[i].pid &&
           moves[j].to_node == moves[i].to_node) {
      ranges.push_back(moves[j].range);
      ++j;
    }
    const MoveStats st = deps_.mover->move(moves[i].pid, ranges, moves[i].to_node);
    telemetry.record_moves(st, moves[i].to_node);
    moved_total_ += st;
    bucket_.consume(std::min(st.bytes_moved, bucket_.available()));
    if (auto it = targets_.find(moves[i].pid); it != targets_.end()) {
      it->second.moved += st;
      for (const auto& r : ranges) it->second.heat->mark_moved(r, moves[i].to_node, now);
    }
    if (st.gone == 0 && st.moved + st.already_there == 0 && st.requested > 0) {
      spdlog::warn(
          "moving {} pages of {} to node {}: none moved (busy {}, pinned {}, "
          "no memory {}, permission {}, errno {})",
          st.requested, moves[i].pid, moves[i].to_node, st.busy, st.pinned, st.no_memory,
          st.permission, st.last_errno);
    }
    i = j;
  }
  return {};
}

std::string Controller::summary() const {
  std::uint64_t slow = 0;
  std::uint64_t total = 0;
  std::set<int> targets_nodes;
  for (const auto& role : policy::classify_nodes(topology_)) {
    if (role.demotion_target) targets_nodes.insert(role.node);
  }
  for (const auto& [pid, t] : targets_) {
    for (const auto& [node, bytes] : t.bytes_per_node) {
      total += bytes;
      if (targets_nodes.contains(node)) slow += bytes;
    }
  }
  return fmt::format("{} targets, {} of {} on CXL, source {}{}", targets_.size(),
                     policy::format_size(slow), policy::format_size(total),
                     deps_.source ? std::string(deps_.source->name()) : "none",
                     deps_.mover ? "" : ", observe-only");
}

json Controller::targets_json(TimeNs now) const {
  json out = json::array();
  for (const auto& [pid, t] : targets_) {
    json nodes = json::object();
    for (const auto& [node, bytes] : t.bytes_per_node) nodes[node_key(node)] = bytes;
    const auto& pol = config_.config.groups[t.group].policy;
    std::uint64_t hot = 0;
    std::uint64_t idle = 0;
    double heat_sum = 0;
    t.heat->for_each_unit(now, [&](const policy::HeatUnit& u) {
      heat_sum += u.heat * static_cast<double>(u.range.bytes()) / static_cast<double>(kPageSize);
      if (u.heat >= pol.promote_heat) hot += u.range.bytes();
      if (pol.cold_age && now >= policy::from_tick(u.last_access) + *pol.cold_age) {
        idle += u.range.bytes();
      }
    });
    out.push_back({{"pid", pid},
                   {"comm", t.comm},
                   {"group", config_.config.groups[t.group].name},
                   {"tracked_bytes", t.heat->tracked_bytes()},
                   {"heat_state_bytes", t.heat->memory_bytes()},
                   {"resident_bytes_per_node", nodes},
                   {"not_present_bytes", t.not_present_bytes},
                   {"hot_bytes", hot},
                   {"idle_bytes", idle},
                   {"accesses_per_s", heat_sum},
                   {"planned_moves", t.last_moves.size()},
                   {"moved_pages", t.moved.moved},
                   {"moved_bytes", t.moved.bytes_moved}});
  }
  return out;
}

json Controller::describe(bool full) const {
  json plan = {{"moves", last_plan_.moves.size()},
               {"demote_bytes", last_plan_.demote_bytes},
               {"promote_bytes", last_plan_.promote_bytes},
               {"notes", last_plan_.notes}};
  json st = {{"config", config_.config.file},
             {"source", deps_.source ? json(std::string(deps_.source->name())) : json(nullptr)},
             {"source_reason", deps_.source_reason},
             {"source_error", source_error_},
             {"mover", deps_.mover ? json(std::string(deps_.mover->name())) : json(nullptr)},
             {"observe_only", deps_.mover == nullptr},
             {"observe_reason", deps_.observe_reason},
             {"budget_bytes", bucket_.available()},
             {"steps", steps_},
             {"targets", targets_json(monotonic_now())},
             {"last_plan", plan},
             {"moved_pages_total", moved_total_.moved},
             {"moved_bytes_total", moved_total_.bytes_moved}};
  if (full) {
    json moves = json::array();
    for (const auto& m : last_plan_.moves) {
      moves.push_back({{"pid", m.pid},
                       {"start", m.range.start},
                       {"end", m.range.end},
                       {"from", m.from_node},
                       {"to", m.to_node},
                       {"heat", m.heat},
                       {"why", m.why}});
    }
    st["last_plan"]["detail"] = moves;
  }
  return st;
}

Result<json> Controller::explain(Pid pid, TimeNs now) const {
  auto it = targets_.find(pid);
  if (it == targets_.end()) {
    return fail(fmt::format("pid {} is not a target (see kvtierctl targets)", pid), ESRCH);
  }
  const Target& t = it->second;
  const auto& group = config_.config.groups[t.group];
  const auto& pol = group.policy;
  std::set<int> slow;
  for (const auto& role : policy::classify_nodes(topology_)) {
    if (role.demotion_target) slow.insert(role.node);
  }
  auto planned = [&](const AddrRange& r) -> const PlannedMove* {
    for (const auto& m : t.last_moves) {
      if (m.range.start <= r.start && r.end <= m.range.end) return &m;
    }
    return nullptr;
  };
  auto verdict = [&](const policy::HeatUnit& u) -> std::string {
    if (const auto* m = planned(u.range))
      return fmt::format("moving to node {}: {}", m->to_node, m->why);
    for (const auto& ex : pol.exclude) {
      if (ex.start < u.range.end && u.range.start < ex.end)
        return "excluded by the config: never moved";
    }
    if (u.node < 0) return "not resident (never touched, or swapped out): nothing to move";
    const TimeNs idle =
        now > policy::from_tick(u.last_access) ? now - policy::from_tick(u.last_access) : 0;
    const bool recently_moved =
        u.last_moved != 0 && now < policy::from_tick(u.last_moved) + pol.min_residence;
    if (slow.contains(u.node)) {
      if (pol.promote && u.heat >= pol.promote_heat) {
        return recently_moved
                   ? fmt::format(
                         "hot ({:.2f}/s >= promote_heat {:.2f}/s) but moved "
                         "less than min_residence {} ago",
                         u.heat, pol.promote_heat, policy::format_duration(pol.min_residence))
                   : "hot: waiting for migration budget or DRAM room (see plan notes)";
      }
      return fmt::format("cold on the slow node: heat {:.2f}/s < promote_heat {:.2f}/s", u.heat,
                         pol.promote_heat);
    }
    if (u.heat > pol.demote_heat) {
      return fmt::format("hot: heat {:.2f}/s > demote_heat {:.2f}/s", u.heat, pol.demote_heat);
    }
    if (pol.cold_age && idle < *pol.cold_age) {
      return fmt::format("warm: idle {} < cold_age {}", policy::format_duration(idle),
                         policy::format_duration(*pol.cold_age));
    }
    if (recently_moved) {
      return fmt::format("moved less than min_residence {} ago",
                         policy::format_duration(pol.min_residence));
    }
    return "cold: eligible for demotion, waiting for budget or the fill limit (see plan notes)";
  };
  json runs = json::array();
  json cur;
  t.heat->for_each_unit(now, [&](const policy::HeatUnit& u) {
    const std::string why = verdict(u);
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
           {"idle_s",
            seconds(now > policy::from_tick(u.last_access) ? now - policy::from_tick(u.last_access)
                                                           : 0)},
           {"why", why}};
  });
  if (!cur.is_null()) runs.push_back(cur);
  return json{{"pid", pid}, {"comm", t.comm}, {"group", group.name}, {"ranges", runs}};
}

Result<json> Controller::heatmap(Pid pid, std::size_t bins, TimeNs now) const {
  auto it = targets_.find(pid);
  if (it == targets_.end()) {
    return fail(fmt::format("pid {} is not a target (see kvtierctl targets)", pid), ESRCH);
  }
  const Target& t = it->second;
  json vmas = json::array();
  for (const auto& v : t.vmas) vmas.push_back({v.start, v.end});
  json history = json::array();
  for (const auto& row : t.history) history.push_back(row);
  return json{{"pid", pid},
              {"comm", t.comm},
              {"interval_s", seconds(config_.config.daemon.interval)},
              {"vmas", vmas},
              {"now", bin_heat(t, bins, now)},
              {"history", history}};
}

void Controller::register_commands(Daemon& daemon) {
  daemon.register_command("targets", [this](const json&, const PeerCred&) -> Result<json> {
    return targets_json(monotonic_now());
  });
  auto pid_of = [](const json& args) -> Result<Pid> {
    auto pid = integer_arg(args, "pid", std::nullopt, 1, kMaxPid);
    if (!pid) return std::unexpected(pid.error());
    return static_cast<Pid>(*pid);
  };
  daemon.register_command("explain",
                          [this, pid_of](const json& args, const PeerCred&) -> Result<json> {
                            auto pid = pid_of(args);
                            if (!pid) return std::unexpected(pid.error());
                            return explain(*pid, monotonic_now());
                          });
  daemon.register_command("heatmap",
                          [this, pid_of](const json& args, const PeerCred&) -> Result<json> {
                            auto pid = pid_of(args);
                            if (!pid) return std::unexpected(pid.error());
                            auto bins = integer_arg(args, "bins", kHistoryBins, 1, kMaxBins);
                            if (!bins) return std::unexpected(bins.error());
                            return heatmap(*pid, static_cast<std::size_t>(*bins), monotonic_now());
                          });
}

}  // namespace kvtier::agent
