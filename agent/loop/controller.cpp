#include "agent/loop/controller.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <limits>
#include <map>
#include <numeric>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "agent/host/availability.hpp"
#include "agent/host/clock.hpp"
#include "agent/host/numa_tiering.hpp"
#include "agent/host/procfs.hpp"
#include "agent/host/residency.hpp"
#include "agent/host/self_memory.hpp"
#include "agent/host/topology_reader.hpp"
#include "agent/loop/loop_state.hpp"
#include "agent/loop/pinned_tracker.hpp"
#include "agent/loop/recording.hpp"
#include "agent/loop/shared_pools.hpp"
#include "agent/loop/target_set.hpp"
#include "agent/loop/topology_watch.hpp"
#include "agent/loop/views.hpp"
#include "agent/sources/bpf_events.hpp"
#include "agent/sources/hotness_source.hpp"
#include "agent/sources/return_watch.hpp"
#include "agent/sources/source_registry.hpp"
#include "agent/telemetry/telemetry.hpp"
#include "policy/budget.hpp"
#include "policy/config.hpp"
#include "policy/error.hpp"
#include "policy/heat.hpp"
#include "policy/planner.hpp"
#include "policy/rules.hpp"
#include "policy/topology.hpp"
#include "policy/types.hpp"
#include "policy/units.hpp"

namespace kvtier::agent {
namespace {

// A DAMON region found accessed in at least half of its checks counts as
// touched page by page (HeatParams::region_touch_share): it promotes from a
// slow node and checks demotions, beside the page-level sources. A weaker
// report only keeps its pages from going cold.
constexpr double kRegionTouchShare = 0.5;

// How often every tracked page's node is read (between, only pages sampled).
constexpr TimeNs kFullResidencyEvery = 30'000'000'000;

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

// Bytes per node as the heat table knows them.
std::map<int, std::uint64_t> bytes_per_node(const policy::HeatTable& heat, TimeNs now) {
  std::map<int, std::uint64_t> out;
  heat.for_each_run(now, [&](const policy::HeatUnit& u, std::uint64_t n) {
    if (u.node >= 0) out[u.node] += n * u.range.bytes();
  });
  return out;
}

// What the sources watch of a target: its tracked mappings and its borrowed
// mappings of shared pools (their evidence goes to the pool's owner), sorted.
std::vector<AddrRange> watched_ranges(const Target& t) {
  if (t.borrowed.empty()) return t.vmas;
  std::vector<AddrRange> out = t.vmas;
  out.insert(out.end(), t.borrowed.begin(), t.borrowed.end());
  std::ranges::sort(out, {}, &AddrRange::start);
  return out;
}

// Whether `addr` lies in one of `vmas` (sorted, disjoint).
bool in_tracked(const std::vector<AddrRange>& vmas, std::uint64_t addr) {
  auto it = std::ranges::upper_bound(vmas, addr, {}, &AddrRange::start);
  return it != vmas.begin() && std::prev(it)->contains(addr);
}

}  // namespace

Controller::Controller(policy::CompiledConfig config, ControllerDeps deps, TimeNs now)
    : deps_(std::move(deps)),
      state_(std::move(config), TargetSet(deps_.paths, deps_.self, deps_.pools)),
      bucket_(state_.config.config.limits.migrate_rate, state_.config.config.limits.migrate_burst,
              now) {
  for (const auto& s : deps_.sources) {
    state_.sources.push_back(SourceStatus{.kind = s.source->kind(), .reason = s.reason});
  }
  state_.kernel_tiering = deps_.tiering != nullptr;
  if (deps_.mover) state_.mover = deps_.mover->name();
  if (!deps_.thread_cpu) deps_.thread_cpu = thread_cpu_now;
  state_.observe_reason = deps_.observe_reason;
  state_.discovery = deps_.discovery;
  state_.process_watcher = deps_.process_events;
  state_.budget_bytes = bucket_.available();
  reset_feedback();
}

void Controller::reset_feedback() {
  state_.feedback.clear();
  for (const auto& g : state_.config.config.groups) state_.feedback.emplace_back(g.policy);
}

Controller::~Controller() {
  shutdown();
}

// The config's [tiering] wishes, applied to the kernel; what could not be set is
// kept as the error (status shows it) and the loop runs on without it.
void Controller::apply_tiering() {
  state_.tiering_applied = true;
  state_.tiering_saw_watch = return_watch() != nullptr;
  if (!deps_.tiering) return;
  const auto& c = state_.config.config.tiering;
  const auto ms = [](std::optional<TimeNs> t) {
    return t ? std::optional<std::uint64_t>(*t / 1'000'000) : std::nullopt;
  };
  const auto mib = [](std::optional<std::uint64_t> b) {
    return b ? std::optional<std::uint64_t>(*b >> 20) : std::nullopt;
  };
  const std::uint64_t bits =
      c.numa_balancing == policy::NumaBalancingMode::kTiering
          ? kNumaBalancingNormal | kNumaBalancingTiering
          : (c.numa_balancing == policy::NumaBalancingMode::kTieringOnly ? kNumaBalancingTiering
                                                                         : 0);
  std::optional<TimeNs> threshold = c.promote_threshold;
  if (threshold == policy::kPromoteAuto) {
    threshold = state_.tiering_saw_watch ? policy::kPromoteByKvtier : policy::kPromoteOnFirstAccess;
  }
  state_.fault_path_promotions = threshold != policy::kPromoteByKvtier;
  auto changed = deps_.tiering->apply(TieringWish{
      .balancing_bits = bits,
      .hot_threshold_ms = ms(threshold),
      .scan_period_min_ms = ms(c.scan_period_min),
      .scan_period_max_ms = ms(c.scan_period_max),
      .scan_size_mb = mib(c.scan_size),
      // "MB/s" in 2^20 bytes, as MiB/s (kernel/sched/fair.c shifts it by 20 - PAGE_SHIFT).
      .promote_rate_limit_mbps = mib(c.promote_rate_limit)});
  if (changed) {
    state_.tiering_error.clear();
    for (const auto& line : *changed) spdlog::info("tiering: {}", line);
    state_.tiering_changes.insert(state_.tiering_changes.end(), changed->begin(), changed->end());
  } else {
    state_.tiering_error = changed.error().message;
    spdlog::warn("tiering: {}: accesses to demoted pages may go unseen and unpromoted",
                 changed.error().message);
  }
  state_.tiering = deps_.tiering->read();
}

namespace {

// The scan period that brings `rate` hint faults a second to `budget`: longer in
// proportion above it (at most 8 times a step, at most kMaxPacedScanPeriod),
// halved back toward `base` below a quarter of it, else `cur`.
TimeNs paced_period(TimeNs cur, TimeNs base, double rate, double budget) {
  if (rate > budget) {
    const double longer = static_cast<double>(cur) * std::min(8.0, rate / budget);
    return std::min(static_cast<TimeNs>(longer), std::max(policy::kMaxPacedScanPeriod, base));
  }
  if (rate < budget / 4 && cur > base) return std::max(base, cur / 2);
  return cur;
}

}  // namespace

// The kernel scans a process once per scan period of its own CPU time, so a
// server running flat out is unmapped, and faults, many times as often as one
// that waits: kvtierd keeps the host's hint faults near [tiering]
// max_hint_faults_per_sec by lengthening both periods, and gives the configured
// ones back once the faults are few.
void Controller::pace_scan(TimeNs now) {
  const auto& c = state_.config.config.tiering;
  auto& p = state_.scan_pacing;
  if (!deps_.tiering || c.max_hint_faults_per_sec == 0 || !c.scan_period_min ||
      !c.scan_period_max) {
    return;
  }
  auto faults = deps_.tiering->hint_faults();
  if (!faults) return;
  const auto last = std::exchange(p.last, std::pair{now, *faults});
  if (!last || now <= last->first || *faults < last->second) return;
  const double rate =
      static_cast<double>(*faults - last->second) * 1e9 / static_cast<double>(now - last->first);
  p.faults_per_sec = rate;
  const TimeNs base = *c.scan_period_min;
  const TimeNs cur = p.period.value_or(base);
  const TimeNs next = paced_period(cur, base, rate, static_cast<double>(c.max_hint_faults_per_sec));
  if (next == cur) return;
  // The max keeps its ratio to the min, as configured.
  const TimeNs next_max =
      std::min(*c.scan_period_max / base * next, TimeNs{3600} * policy::kNsPerSec);
  auto changed = deps_.tiering->apply(
      TieringWish{.scan_period_min_ms = static_cast<std::uint64_t>(next / 1'000'000),
                  .scan_period_max_ms = static_cast<std::uint64_t>(next_max / 1'000'000)});
  if (!changed) {
    spdlog::warn("tiering: pacing the NUMA scan: {}", changed.error().message);
    return;
  }
  spdlog::info(
      "tiering: {:.0f} NUMA hint faults/s against max_hint_faults_per_sec {}: scan "
      "period {} ms (configured {} ms)",
      rate, c.max_hint_faults_per_sec, next / 1'000'000, base / 1'000'000);
  p.period = next == base ? std::nullopt : std::optional<TimeNs>(next);
  state_.tiering = deps_.tiering->read();
}

void Controller::shutdown() {
  if (deps_.tiering) {
    for (const auto& line : deps_.tiering->restore()) spdlog::info("tiering: {}", line);
  }
  stop_sources();
}

void Controller::stop_sources() {
  for (std::size_t i = 0; i < deps_.sources.size(); ++i) {
    if (!state_.sources[i].started) continue;
    deps_.sources[i].source->stop();
    state_.sources[i].started = false;
    spdlog::info("source {} stopped", deps_.sources[i].source->name());
  }
}

void Controller::on_process_events(std::span<const ProcEvent> events) {
  bool changed = false;
  const auto params = [this](std::size_t g) { return heat_params(g); };
  for (const ProcEvent& e : events) {
    ++state_.process_events;
    if (e.kind == ProcEventKind::kExit) {
      changed |= state_.targets.forget(e.pid);
    } else {
      changed |= state_.targets.consider(state_.config, e.pid, params);
    }
  }
  if (!changed) return;
  // Before the first step the sources start there, with the targets.
  if (state_.steps == 0) {
    targets_changed_ = true;
    return;
  }
  if (auto ok = start_sources(true); !ok) spdlog::warn("{}", ok.error().message);
}

void Controller::replace_sources(std::vector<LoopSource> sources) {
  stop_sources();
  deps_.sources = std::move(sources);
  state_.sources.clear();
  for (const auto& s : deps_.sources) {
    state_.sources.push_back(SourceStatus{.kind = s.source->kind(), .reason = s.reason});
  }
  targets_changed_ |=
      state_.targets.rematch(state_.config, [this](std::size_t g) { return heat_params(g); });
  targets_changed_ = true;  // the new sources hear of the targets at the next step
}

policy::HeatParams Controller::heat_params(std::size_t group) const {
  // Region granularity only when every source reports regions (DAMON): page
  // evidence next to regions keeps its pages.
  const bool regions =
      !deps_.sources.empty() && std::ranges::all_of(deps_.sources, [](const LoopSource& s) {
        return s.source->kind() == SourceKind::kDamon;
      });
  const auto& cfg = state_.config.config;
  const auto& pol = cfg.groups[group].policy;
  return policy::HeatParams{
      .half_life = pol.half_life,
      .granularity = regions ? policy::Granularity::kRegion : policy::Granularity::kPage,
      .region_interval = policy::damon_intervals(cfg).aggr,
      .misdemotion_window = pol.cold_age.value_or(0),
      .region_touch_share = kRegionTouchShare};
}

void Controller::apply_config(policy::CompiledConfig config, TimeNs now) {
  state_.config = std::move(config);
  const auto& limits = state_.config.config.limits;
  bucket_.reconfigure(limits.migrate_rate, limits.migrate_burst, now);
  state_.budget_bytes = bucket_.available();
  // Re-match now rather than at the next step: until then `status`, `targets`
  // and `explain` index the new config's groups with each target's group.
  targets_changed_ |=
      state_.targets.rematch(state_.config, [this](std::size_t g) { return heat_params(g); });
  reset_feedback();
  state_.tiering_applied = false;     // the next step applies [tiering] again
  state_.scan_pacing.period.reset();  // ... with its configured scan periods
}

Result<void> Controller::step(const StepContext& ctx, Telemetry& telemetry) {
  PhaseClock clock(deps_.thread_cpu, state_.cpu);
  auto ok = run_step(ctx, telemetry, clock);
  export_cpu(telemetry);
  // Once a step, not at every promotion tick: a file read for a slow gauge.
  telemetry.set("process_resident_memory_bytes", {}, static_cast<double>(resident_bytes()));
  return ok;
}

Result<void> Controller::run_step(const StepContext& ctx, Telemetry& telemetry, PhaseClock& clock) {
  ++state_.steps;
  rec(ctx.now,
      [&] { return RecStep{.now = ctx.now, .kind = StepKind::kStep, .paused = ctx.paused}; });
  sync_tiering();
  pace_scan(ctx.now);
  auto found = discover(ctx.now, telemetry);
  clock.charge(LoopPhase::kDiscover);
  if (!found) return found;
  ingest(ctx.now, telemetry);
  clock.charge(LoopPhase::kSources);
  read_residency(ctx.now, telemetry);
  clock.charge(LoopPhase::kResidency);
  plan(ctx.now, telemetry);
  clock.charge(LoopPhase::kPlan);
  if (may_move(ctx)) dispatch(state_.last_plan.moves, ctx.now, telemetry);
  promote_groups(ctx.now, telemetry, may_move(ctx));
  clock.charge(LoopPhase::kMove);
  record(ctx.now, telemetry);
  clock.charge(LoopPhase::kRecord);
  sync_tiering();  // the sources may have started (or stopped) in this step
  state_.wake_blocked = false;
  return {};
}

// [tiering] once after start and every reload, and again when "auto"'s
// promote_threshold would now resolve otherwise (a return watch came or went).
void Controller::sync_tiering() {
  const bool watch_changed =
      state_.config.config.tiering.promote_threshold == policy::kPromoteAuto &&
      state_.tiering_saw_watch != (return_watch() != nullptr);
  if (!state_.tiering_applied || watch_changed) apply_tiering();
}

void Controller::export_cpu(Telemetry& telemetry) {
  const ReturnWatch* w = return_watch();
  state_.return_watch = w != nullptr ? std::optional(w->stats()) : std::nullopt;
  if (state_.return_watch) {
    const ReturnWatchStats& r = *state_.return_watch;
    for (const auto& [event, n] : {std::pair{"armed", r.armed}, std::pair{"returned", r.returns},
                                   std::pair{"failed", r.failed}}) {
      telemetry.set("kvtier_return_watch_chunks_total", {{"event", event}}, static_cast<double>(n));
    }
  }
  for (std::size_t i = 0; i < kLoopPhases; ++i) {
    telemetry.set("kvtier_loop_cpu_seconds_total", {{"phase", kLoopPhaseNames[i]}},
                  static_cast<double>(state_.cpu[i]) / 1e9);
  }
  telemetry.set("process_cpu_seconds_total", {}, process_cpu_seconds());
}

Result<void> Controller::read_topology_now() {
  auto topo = deps_.topology ? deps_.topology() : read_topology(deps_.paths);
  if (!topo) return std::unexpected(topo.error());
  state_.topology = std::move(*topo);
  return {};
}

// Between cycles only free memory changes that matters to a promotion: read
// that (refresh_node_memory), and the whole topology if a node went away.
Result<void> Controller::refresh_memory_now() {
  if (deps_.topology || state_.topology.nodes.empty()) return read_topology_now();
  if (auto ok = refresh_node_memory(deps_.paths, state_.topology); ok) return ok;
  return read_topology_now();
}

Result<void> Controller::discover(TimeNs now, Telemetry& telemetry) {
  const policy::Topology before =
      stepped_topology_.nodes.empty() ? state_.topology : stepped_topology_;
  if (auto ok = read_topology_now(); !ok) return ok;
  stepped_topology_ = state_.topology;
  note_topology_changes(before, state_, now, telemetry);
  rec(now, [&] { return RecTopology{.topology = state_.topology}; });
  telemetry.set_node_memory(state_.topology);
  telemetry.set("kvtier_observe_only", {}, deps_.mover ? 0 : 1);
  bool changed = false;
  if (!deps_.process_events || !state_.last_rescan || now - *state_.last_rescan >= kRescanEvery) {
    changed =
        state_.targets.discover(state_.config, [this](std::size_t g) { return heat_params(g); });
    if (changed && deps_.process_events && state_.last_rescan) {
      ++state_.rescan_corrections;
      spdlog::info("the /proc rescan changed the targets: the process watcher missed an event");
    }
    state_.last_rescan = now;
  }
  if (auto ok = start_sources(changed || std::exchange(targets_changed_, false)); !ok) return ok;
  std::uint64_t host_bytes = 0;
  for (const auto& n : state_.topology.nodes) host_bytes += n.mem_total_bytes;
  state_.targets.track_vmas(now, host_bytes);
  update_scan_coverage(now);
  refresh_pinned(state_.targets, deps_.paths, now);
  rec_targets(now);
  return tell_ranges();
}

// Sources that watch address ranges (DAMON) watch the mappings tracked.
Result<void> Controller::tell_ranges() {
  std::vector<TargetRanges> ranges;
  for (const auto& [pid, t] : state_.targets.all()) {
    ranges.push_back(TargetRanges{.pid = pid, .ranges = watched_ranges(t)});
  }
  for (std::size_t i = 0; i < deps_.sources.size(); ++i) {
    if (!state_.sources[i].started) continue;
    HotnessSource& src = *deps_.sources[i].source;
    if (auto ok = src.set_ranges(ranges); !ok) {
      state_.sources[i].error = ok.error().message;
      return fail(fmt::format("source {}: {}", src.name(), ok.error().message), ok.error().code);
    }
  }
  return {};
}

namespace {

// The target's CPU rate (CPU seconds per second, all threads) over about the
// last `window`: from its oldest sample within it, or its oldest of all while
// it has none that old. nullopt: fewer than two samples a second apart.
std::optional<double> cpu_rate(const Target& t, TimeNs now, TimeNs window) {
  const auto& s = t.cpu_samples;
  if (s.size() < 2) return std::nullopt;
  auto from = std::ranges::find_if(s, [&](const auto& p) { return now - p.first <= window; });
  if (from != s.begin()) --from;  // the last one at least `window` old
  if (std::next(from) == s.end()) --from;
  const TimeNs wall = s.back().first - from->first;
  if (wall < policy::kNsPerSec) return std::nullopt;
  return static_cast<double>(s.back().second - from->second) / static_cast<double>(wall);
}

}  // namespace

// A target's hint faults see its reads only once the kernel's NUMA scan has
// unmapped its pages, and the scan runs once per scan period of the process's
// own CPU time (task_tick_numa): a process that runs 3 ms a second is gone
// through about once every half minute at a 100 ms period. Where that is less
// often than once per its group's cold age, the faults' silence says nothing
// about its reads: it is scan-blind, and the sources that would stand by watch
// it (start_sources). It sees again below half its cold age (no flapping).
void Controller::update_scan_coverage(TimeNs now) {
  const bool faults =
      state_.any_balancing() && std::ranges::any_of(state_.sources, [](const SourceStatus& s) {
        return s.started && s.kind == SourceKind::kFault;
      });
  // The configured period, not the one max_hint_faults_per_sec paced longer:
  // a target scanned less because its hint faults are too many is not blind
  // to them, and the dirty scan's write faults would undo the pacing. With
  // "keep", the kernel's minimum now (its default where it does not show it).
  constexpr std::uint64_t kKernelDefaultPeriodMs = 1000;
  const auto period = static_cast<double>(state_.config.config.tiering.scan_period_min.value_or(
      static_cast<TimeNs>(state_.tiering.scan_period_min_ms.value_or(kKernelDefaultPeriodMs)) *
      1'000'000));
  const std::vector<TimeNs> cold_ages = state_.cold_ages();
  for (auto& [pid, t] : state_.targets.all()) {
    const TimeNs cold_age = t.group < cold_ages.size() ? cold_ages[t.group] : 0;
    const auto rate = cold_age > 0 ? cpu_rate(t, now, cold_age) : std::nullopt;
    if (!rate) continue;  // not known yet: as it was
    const double interval = *rate > 0 ? period / *rate : 1e18;
    t.scan_interval = static_cast<TimeNs>(std::min(interval, 1e18));
    const bool blind = faults && (t.scan_blind ? interval > static_cast<double>(cold_age) / 2
                                               : interval > static_cast<double>(cold_age));
    if (blind != t.scan_blind) {
      spdlog::info(
          "target {} ({}): {:.1f}% of a CPU, so the kernel's NUMA scan goes through it {} "
          "against a cold age of {:.0f} s{}",
          pid, t.comm, 100 * *rate, scan_interval_words(t.scan_interval),
          static_cast<double>(cold_age) / 1e9,
          blind ? ": hint faults miss its reads, DAMON and the dirty scan watch it"
                : ": hint faults see its reads again");
    }
    t.scan_blind = blind;
  }
}

// The targets the hint faults do not cover (Target::scan_blind), sorted.
std::vector<Pid> Controller::scan_blind_pids() const {
  std::vector<Pid> out;
  for (const auto& [pid, t] : state_.targets.all()) {
    if (t.scan_blind) out.push_back(pid);
  }
  return out;
}

// Why a source of `kind` is not needed now (standby_reason), or "" when it is:
// the started sources, and the kernel's knob as read at the last [tiering]
// apply; without a tiering handle (replay), the config's.
std::string Controller::not_needed(SourceKind kind) const {
  return standby_reason(kind, state_.running_sources(),
                        {.hint_faults = state_.any_balancing(),
                         .hint_faults_in_dram = state_.normal_balancing(),
                         .dirty_beside_faults = state_.config.config.sources.dirty_beside_faults});
}

// Starts the sources not running yet and tells every source that starts or
// whose targets changed the pids to watch. Sources that may stand by (DAMON,
// soft-dirty) come last: they stand by, stopped, while other evidence sees what
// they would (not_needed), and start again when it no longer does. An error
// stops the step (the daemon logs it); the next step tries again.
Result<void> Controller::start_sources(bool targets_changed) {
  const std::vector<Pid> all_pids = state_.targets.pids();
  const std::vector<Pid> blind = scan_blind_pids();
  Result<void> result;
  std::vector<std::size_t> order(deps_.sources.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::ranges::stable_partition(order, [this](std::size_t i) {
    const SourceKind k = state_.sources[i].kind;
    return k != SourceKind::kDamon && k != SourceKind::kSoftDirty;
  });
  for (const std::size_t i : order) {
    HotnessSource& src = *deps_.sources[i].source;
    SourceStatus& status = state_.sources[i];
    std::string why = not_needed(status.kind);
    // Where it would stand by, it still watches what the hint faults miss.
    const std::vector<Pid>& pids = why.empty() ? all_pids : blind;
    if (!why.empty() && blind.empty()) {
      if (status.standby.empty()) {
        src.stop();  // also when it never started: what it holds is dropped
        spdlog::info("source {} stands by: {}", src.name(), why);
      }
      status.started = false;
      status.standby = std::move(why);
      continue;
    }
    status.standby.clear();
    if (status.started && !targets_changed && pids == status.pids) continue;
    Result<void> ok;
    if (!status.started) {
      ok = src.start();
      if (ok) {
        status.started = true;
        status.error.clear();
        // What a source sees can change between its choice and its start: the
        // first step sets [tiering]'s kernel.numa_balancing, and only then do
        // faults include NUMA hint faults. Status says what holds now.
        if (const Availability now_seen = src.probe(); now_seen.ok) {
          status.reason = now_seen.why;
        }
        spdlog::info("source {} started: {}", src.name(), status.reason);
      }
    }
    if (ok) ok = src.set_targets(pids);
    if (ok) {
      status.pids = pids;
      continue;
    }
    status.error = ok.error().message;
    if (result) {
      result = fail(fmt::format("source {}: {}", src.name(), ok.error().message), ok.error().code);
    }
  }
  return result;
}

void Controller::ingest(TimeNs now, Telemetry& telemetry) {
  for (std::size_t i = 0; i < deps_.sources.size(); ++i) {
    if (!state_.sources[i].started) continue;
    HotnessSource& src = *deps_.sources[i].source;
    SourceBatch batch;
    if (auto ok = src.collect(now, batch); !ok) {
      state_.sources[i].error = ok.error().message;
      spdlog::warn("source {}: {}", src.name(), ok.error().message);
    }
    // What the sharers of a pool saw is its owner's evidence (shared_pools.hpp).
    state_.targets.pools().to_owners(batch.samples, batch.regions);
    rec(now, [&] { return RecBatch{.source = static_cast<std::uint32_t>(i), .batch = batch}; });
    add_to_heat(batch);
    telemetry.record_source_batch(src.name(), batch.samples.size(), batch.regions.size());
  }
}

// Only what falls in tracked mappings counts: DAMON's regions span the gaps
// between mappings and samples land on stacks and files, and heat there would
// be tracked (and shown) but could never be moved. A page-level sample of a page
// on a slow node is the evidence that promotes it: its first one starts the
// promotion latency's clock.
void Controller::add_to_heat(const SourceBatch& batch) {
  std::uint64_t used = 0;
  const policy::NodeFacts facts(state_.topology);
  for (const auto& s : batch.samples) {
    Target* t = state_.targets.find(s.pid);
    if (t == nullptr || !in_tracked(t->vmas, s.addr)) continue;
    if (auto u = t->heat->at(s.addr, s.time); u && slow_for(facts, t->group, u->node)) {
      ++state_.feedback[t->group].slow_touches;
      const TimeNs first = s.first_time != 0 ? s.first_time : s.time;
      auto [it, fresh] = t->first_slow_touch.try_emplace(u->range.start, first);
      if (!fresh) it->second = std::min(it->second, first);
      if (state_.config.config.groups[t->group].policy.promote_groups) {
        groups_.touch(s.pid, s.addr, s.time, state_.feedback[t->group].tuner.effective());
      }
    }
    t->heat->add(s);
    t->touched_pages.push_back(s.addr & ~(kPageSize - 1));
    ++used;
  }
  for (const auto& r : batch.regions) {
    Target* t = state_.targets.find(r.pid);
    if (t == nullptr) continue;
    bool any = false;
    for (const auto& v : t->vmas) {
      if (v.end <= r.range.start) continue;
      if (v.start >= r.range.end) break;
      RegionAccess part = r;
      part.range = {std::max(v.start, r.range.start), std::min(v.end, r.range.end)};
      t->heat->add(part);
      any = true;
    }
    if (any) ++used;
  }
  spdlog::debug("step {}: {} samples, {} regions, {} for targets", state_.steps,
                batch.samples.size(), batch.regions.size(), used);
}

// Where every tracked page is (the heat table's nodes), which 2 MiB blocks are
// huge pages (planned whole from now on), and bytes per node for telemetry. A
// full read walks every tracked page (a move_pages status query each, the
// loop's biggest cost), so it happens every kFullResidencyEvery; in between,
// only the pages sampled this step are read again (the kernel may have promoted
// them), and kvtier's own moves are known from the mover.
void Controller::read_residency(TimeNs now, Telemetry& telemetry) {
  std::map<Pid, std::map<int, std::uint64_t>> residency;
  for (auto& [pid, t] : state_.targets.all()) {
    const bool full =
        t.last_full_residency == 0 || now >= t.last_full_residency + kFullResidencyEvery;
    std::string error;
    if (full) {
      PageMap map = deps_.residency.map(pid, t.vmas, &error);
      rec_residency(pid, true, map, now);
      for (const auto& run : map.runs) t.heat->set_node(run.range, run.node);
      watch_slow_runs(t, map);
      t.heat->set_huge_blocks(map.huge_blocks);
      t.bytes_per_node = std::move(map.bytes_per_node);
      t.not_present_bytes = map.not_present_bytes;
      t.huge_blocks = std::move(map.huge_blocks);
      t.last_full_residency = now;
    } else if (!t.touched_pages.empty()) {
      // The pages sampled since the last read may have moved (the kernel's
      // promotions); kvtier's own moves are counted as they happen (move()).
      refresh_touched(t, now, &error);
      t.bytes_per_node = bytes_per_node(*t.heat, now);
    }
    t.touched_pages.clear();
    // Gone or not allowed: what was read counts; discover() drops it next step.
    if (!error.empty()) spdlog::debug("residency of {}: {}", pid, error);
    if (t.heat->granularity() == policy::Granularity::kRegion) t.heat->compact(now);
    residency[pid] = t.bytes_per_node;
    take_heat_events(t, now, telemetry);
  }
  telemetry.set_residency(residency);
}

// The node of every page sampled since the last read (the kernel may have
// promoted it in the fault path).
void Controller::refresh_touched(Target& t, TimeNs now, std::string* error) {
  const std::vector<AddrRange> ranges = page_runs(t.touched_pages);
  t.touched_pages.clear();
  PageMap map = deps_.residency.nodes(t.pid, ranges, error);
  rec_residency(t.pid, false, map, now);
  for (const auto& run : map.runs) {
    if (run.node >= 0) t.heat->set_node(run.range, run.node);
  }
}

// Between steps: page-level evidence in, and what it says was accessed on a
// slow node goes back to DRAM now, by the same rule and within the same limits
// as the step's plan (policy::plan_promotions), without planning anything else.
Result<void> Controller::promote_step(const StepContext& ctx, Telemetry& telemetry) {
  if (state_.steps == 0 || !may_move(ctx)) return {};
  PhaseClock clock(deps_.thread_cpu, state_.cpu);
  auto ok = run_promote_step(ctx, telemetry, clock);
  export_cpu(telemetry);
  return ok;
}

Result<void> Controller::run_promote_step(const StepContext& ctx, Telemetry& telemetry,
                                          PhaseClock& clock) {
  const TimeNs now = ctx.now;
  rec(now, [&] { return RecStep{.now = now, .kind = StepKind::kPromote, .paused = ctx.paused}; });
  ingest(now, telemetry);
  clock.charge(LoopPhase::kSources);
  auto topo = refresh_memory_now();
  clock.charge(LoopPhase::kDiscover);
  if (!topo) return topo;
  rec(now, [&] { return RecTopology{.topology = state_.topology}; });
  std::vector<policy::PromotionCandidate> cands;
  policy::Snapshot snap = snapshot(now);
  for (std::size_t i = 0; i < snap.targets.size(); ++i) {
    Target* t = state_.targets.find(snap.targets[i].pid);
    if (!t->touched_pages.empty()) {
      std::string error;
      refresh_touched(*t, now, &error);
    }
    take_heat_events(*t, now, telemetry);
    for (const auto& [addr, first] : t->first_slow_touch) {
      if (auto u = t->heat->at(addr, now)) cands.push_back({.target = i, .unit = *u});
    }
  }
  clock.charge(LoopPhase::kResidency);
  if (cands.empty()) return {};
  bool spent = false;
  const std::vector<policy::PromotionCandidate> spare = spare_units(snap, cands, now, &spent);
  const Plan p = policy::plan_promotions(snap, cands, spare);
  rec(now, [&] { return RecPlan{.plan = p}; });
  clock.charge(LoopPhase::kPlan);
  dispatch(p.moves, now, telemetry);
  promote_groups(now, telemetry, true);
  clock.charge(LoopPhase::kMove);
  // The last plan's spare list ran out while pages accessed on a slow node wait
  // for room (a burst of them): plan again now, as a step would, rather than
  // leave them there until the next step. Since that plan, more DRAM pages may
  // have become idle long enough to give way.
  if (p.waiting_bytes > 0 && spent && std::exchange(state_.replan_when_spent, false)) {
    telemetry.add("kvtier_promotion_replans_total", {});
    plan(now, telemetry);
    clock.charge(LoopPhase::kPlan);
    dispatch(state_.last_plan.moves, now, telemetry);
    clock.charge(LoopPhase::kMove);
  } else if (p.waiting_bytes > 0 && spent) {
    // No room left until the next step demotes: more wake-ups would only plan
    // the same wait again (the interval's tick still runs).
    state_.wake_blocked = true;
  }
  if (recording_) recording_->flush();
  return {};
}

// The last step's spare as it is now, coldest first, as far as an exchange for
// the candidates could reach (twice their bytes, plus every DRAM node's
// headroom); spare units that moved since are dropped from it. `spent`: the
// spare ran out before that reach.
std::vector<policy::PromotionCandidate> Controller::spare_units(
    const policy::Snapshot& snap, std::span<const policy::PromotionCandidate> cands, TimeNs now,
    bool* spent) {
  std::uint64_t reach = 0;
  for (const auto& c : cands) reach += 2 * c.unit.range.bytes();
  const auto& limits = state_.config.config.limits;
  for (const auto& n : state_.topology.nodes) {
    if (n.has_cpus()) {
      reach += limits.min_free + static_cast<std::uint64_t>(limits.dram_headroom *
                                                            static_cast<double>(n.mem_total_bytes));
    }
  }
  std::map<Pid, std::size_t> index;
  for (std::size_t i = 0; i < snap.targets.size(); ++i) index[snap.targets[i].pid] = i;
  std::vector<policy::PromotionCandidate> out;
  std::uint64_t bytes = 0;
  std::erase_if(state_.spare, [&](const policy::SpareUnit& su) {
    if (bytes >= reach) return false;
    auto it = index.find(su.pid);
    if (it == index.end()) return true;
    const Target* t = state_.targets.find(su.pid);
    auto u = t->heat->at(su.addr, now);
    if (!u || u->node != su.node) return true;
    bytes += u->range.bytes();
    out.push_back({.target = it->second, .unit = *u});
    return false;
  });
  *spent = bytes < reach;
  return out;
}

// What the planner sees now: the topology of the last read, every target's
// heat table, the budget, the groups' effective cold ages.
policy::Snapshot Controller::snapshot(TimeNs now) {
  bucket_.refill(now);
  state_.budget_bytes = bucket_.available();
  policy::Snapshot snap{.topology = &state_.topology,
                        .groups = state_.config.config.groups,
                        .limits = state_.config.config.limits,
                        .now = now,
                        .budget_bytes = state_.budget_bytes,
                        .cold_age = state_.cold_ages(),
                        .fault_path_promotions = state_.fault_path_promotions};
  for (auto& [pid, t] : state_.targets.all()) {
    snap.targets.push_back(policy::TargetView{.pid = pid,
                                              .group = t.group,
                                              .heat = t.heat.get(),
                                              .dram_reads_unseen = state_.dram_reads_unseen(t),
                                              .pinned = t.pinned.active()});
  }
  return snap;
}

// What the heat table learnt about demoted pages this step, for the group's
// feedback; pages the kernel promoted no longer wait for kvtier, and their wait
// goes into the promotion latency as the kernel's: from the first sample on the
// slow node to the residency read that found them in DRAM. The kernel promotes
// in the fault path, so that is an upper bound, about one promotion tick over.
void Controller::take_heat_events(Target& t, TimeNs now, Telemetry& telemetry) {
  const policy::HeatEvents ev = t.heat->take_events();
  GroupFeedback& fb = state_.feedback[t.group];
  fb.misdemoted_bytes += ev.misdemoted_bytes;
  fb.step_misdemoted += ev.misdemoted_bytes;
  fb.reactivated_bytes += ev.reactivated_bytes;
  fb.kernel_promoted_bytes += ev.moved_by_kernel_bytes;
  const policy::NodeFacts facts(state_.topology);
  std::erase_if(t.first_slow_touch, [&](const auto& kv) {
    auto u = t.heat->at(kv.first, now);
    if (!u) return true;  // no longer tracked
    if (slow_for(facts, t.group, u->node)) return false;
    if (u->node >= 0) observe_promotion(telemetry, "kernel", now, kv.second);
    return true;
  });
}

bool Controller::slow_for(const policy::NodeFacts& facts, std::size_t group, int node) const {
  const auto& own = state_.config.config.groups[group].demotion_node;
  return facts.slow(node) || (own && *own == node);
}

void Controller::plan(TimeNs now, Telemetry& telemetry) {
  const policy::Snapshot snap = snapshot(now);
  for (auto& [pid, t] : state_.targets.all()) t.last_moves.clear();
  state_.last_plan = policy::plan(snap, &state_.spare);
  state_.replan_when_spent = !state_.spare.empty();
  rec(now, [&] { return RecPlan{.plan = state_.last_plan}; });
  telemetry.record_plan(state_.last_plan);
  for (const auto& m : state_.last_plan.moves) {
    if (Target* t = state_.targets.find(m.pid)) t->last_moves.push_back(m);
  }
}

// Without a hotness source every page looks idle: never demote blindly.
bool Controller::may_move(const StepContext& ctx) const {
  // Every source runs, or stands by (DAMON while page-level evidence sees every node).
  const bool sources_run =
      !state_.sources.empty() && std::ranges::all_of(state_.sources, [](const SourceStatus& s) {
        return s.started || !s.standby.empty();
      });
  return deps_.mover && sources_run && !ctx.paused;
}

namespace {

// `ranges` in pieces of at most `piece` bytes (a multiple of 2 MiB): each range
// cut at the multiples of `piece`, so a huge page is never cut, then packed.
std::vector<std::vector<AddrRange>> in_pieces(std::span<const AddrRange> ranges,
                                              std::uint64_t piece) {
  std::vector<std::vector<AddrRange>> out(1);
  std::uint64_t filled = 0;
  for (const AddrRange& r : ranges) {
    for (std::uint64_t a = r.start; a < r.end;) {
      const AddrRange part{a, std::min(r.end, (a / piece + 1) * piece)};
      if (filled + part.bytes() > piece && filled > 0) {
        out.emplace_back();
        filled = 0;
      }
      out.back().push_back(part);
      filled += part.bytes();
      a = part.end;
    }
  }
  return out;
}

}  // namespace

// Consecutive moves of one target to one node go to the mover together, a
// piece at a time, until the step's slice of move time is spent.
void Controller::dispatch(const std::vector<PlannedMove>& moves, TimeNs now, Telemetry& telemetry) {
  const auto clock = deps_.move_clock ? deps_.move_clock : std::function<TimeNs()>(monotonic_now);
  // A mover that moves in the background (DAMOS) gets each group whole, as before.
  const bool sliced = deps_.mover->moves_in_call();
  const std::uint64_t piece =
      sliced ? std::max(kHugePageSize, deps_.move_piece_bytes / kHugePageSize * kHugePageSize)
             : std::numeric_limits<std::uint64_t>::max();
  const TimeNs start = clock();
  std::uint64_t deferred = 0;
  bool moved_any = false;
  std::vector<AddrRange> ranges;
  for (std::size_t i = 0; i < moves.size();) {
    std::size_t j = i;
    ranges.clear();
    const bool promotion = moves[i].reason == MoveReason::kHotPromotion;
    while (j < moves.size() && moves[j].pid == moves[i].pid &&
           moves[j].to_node == moves[i].to_node &&
           (moves[j].reason == MoveReason::kHotPromotion) == promotion) {
      ranges.push_back(moves[j++].range);
    }
    for (const auto& part : in_pieces(ranges, piece)) {
      // At least one piece a dispatch, so a slow node still gets its moves.
      if (sliced && moved_any && clock() - start >= deps_.move_slice_ns) {
        for (const auto& r : part) deferred += r.bytes();
        continue;
      }
      move(moves[i].pid, part, moves[i].to_node, !promotion, now, telemetry);
      moved_any = true;
    }
    i = j;
  }
  if (deferred > 0) {
    telemetry.add("kvtier_move_deferred_bytes_total", {}, static_cast<double>(deferred));
    spdlog::debug("move: {} ms spent, {} bytes of the plan left to the next step",
                  (clock() - start) / 1'000'000, deferred);
  }
  state_.budget_bytes = bucket_.available();
}

void Controller::move(Pid pid, std::span<const AddrRange> ranges, int to_node, bool demotion,
                      TimeNs now, Telemetry& telemetry) {
  Target* t = state_.targets.find(pid);
  const std::span<const std::uint64_t> huge = t != nullptr
                                                  ? std::span<const std::uint64_t>(t->huge_blocks)
                                                  : std::span<const std::uint64_t>();
  // The residency phase has just located these pages: the mover need not look again.
  const MoveStats st = deps_.mover->move_located(pid, ranges, to_node, huge);
  note_refused(state_.targets, deps_.mover->take_refused(), now);
  if (recording_) {
    rec(now, [&] {
      return RecMove{.pid = pid,
                     .to_node = to_node,
                     .demotion = demotion,
                     .ranges = {ranges.begin(), ranges.end()},
                     .stats = st};
    });
  }
  telemetry.record_moves(st, to_node);
  state_.moved_total += st;
  state_.record_move(now, st.bytes_moved);
  if (st.no_memory > 0 && demotion) {
    state_.full_node = to_node;
    state_.full_at = now;
  }
  bucket_.consume(std::min(st.bytes_moved, bucket_.available()));
  if (t != nullptr) {
    t->moved += st;
    if (st.moved == st.requested) {
      // Every page moved: the bytes per node follow without reading them again.
      for (const auto& r : ranges) {
        const auto u = t->heat->at(r.start, now);
        const int from = u ? u->node : -1;
        auto& on_from = t->bytes_per_node[from];
        on_from -= std::min(on_from, r.bytes());
        t->bytes_per_node[to_node] += r.bytes();
        if (on_from == 0) t->bytes_per_node.erase(from);
      }
    } else {
      // Pages left behind (busy, pinned, a partial huge page...) are not where
      // the heat table will say: the next step reads every page's node again.
      t->last_full_residency = 0;
    }
    for (const auto& r : ranges) t->heat->mark_moved(r, to_node, now, demotion);
    // Demoted: its first touch wakes the promotion tick. Promoted: no longer watched.
    if (ReturnWatch* w = active_watch()) {
      if (demotion && st.moved > 0) {
        w->arm(pid, ranges);
      } else if (!demotion) {
        w->disarm(pid, ranges);
      }
    }
    GroupFeedback& fb = state_.feedback[t->group];
    (demotion      ? fb.demoted_bytes
     : group_move_ ? fb.group_promoted_bytes
                   : fb.promoted_bytes) += st.bytes_moved;
    if (demotion) fb.step_demoted += st.bytes_moved;
    if (!demotion) observe_promotions(*t, ranges, now, telemetry);
  }
  if (st.gone == 0 && st.moved + st.already_there == 0 && st.requested > 0) {
    spdlog::warn(
        "moving {} pages of {} to node {}: none moved (busy {}, pinned {}, no memory {}, "
        "permission {}, partial huge pages {}, errno {})",
        st.requested, pid, to_node, st.busy, st.pinned, st.no_memory, st.permission,
        st.partial_huge, st.last_errno);
  }
}

// Whatever sits on a slow node is watched, not only what kvtier demoted: blocks
// the kernel placed there when DRAM was full are read back as soon.
void Controller::watch_slow_runs(const Target& t, const PageMap& map) {
  ReturnWatch* w = active_watch();
  if (w == nullptr) return;
  const policy::NodeFacts facts(state_.topology);
  std::vector<AddrRange> slow;
  for (const auto& run : map.runs) {
    if (run.node >= 0 && slow_for(facts, t.group, run.node)) slow.push_back(run.range);
  }
  w->arm(t.pid, slow);
}

// The watch, while kvtierd promotes at first touch itself: with the kernel
// promoting in the fault path, a wake-up would find the page promoted already.
ReturnWatch* Controller::active_watch() const {
  return state_.fault_path_promotions ? nullptr : return_watch();
}

ReturnWatch* Controller::return_watch() const {
  for (std::size_t i = 0; i < deps_.sources.size() && i < state_.sources.size(); ++i) {
    if (!state_.sources[i].started) continue;
    if (ReturnWatch* w = deps_.sources[i].source->return_watch()) return w;
  }
  return nullptr;
}

int Controller::wake_fd() const {
  const ReturnWatch* w = state_.wake_blocked ? nullptr : active_watch();
  return w != nullptr ? w->epoll_fd() : -1;
}

// Promotion latency of kvtier's own: from the first page-level touch on the slow node to the move.
void Controller::observe_promotions(Target& t, std::span<const AddrRange> ranges, TimeNs now,
                                    Telemetry& telemetry) {
  for (const auto& r : ranges) {
    auto it = t.first_slow_touch.lower_bound(r.start);
    while (it != t.first_slow_touch.end() && it->first < r.end) {
      observe_promotion(telemetry, "kvtier", now, it->second);
      it = t.first_slow_touch.erase(it);
    }
  }
}

void Controller::observe_promotion(Telemetry& telemetry, std::string_view by, TimeNs now,
                                   TimeNs first_touch) {
  const TimeNs waited = now > first_touch ? now - first_touch : 0;
  telemetry.observe("kvtier_promotion_latency_seconds", {{"by", std::string(by)}},
                    static_cast<double>(waited) / 1e9);
}

void Controller::record(TimeNs now, Telemetry& telemetry) {
  for (auto& [pid, t] : state_.targets.all()) {
    t.history.push_back(bin_heat(t, kHistoryBins, now));
    while (t.history.size() > kHistorySteps) t.history.pop_front();
  }
  for (std::size_t g = 0; g < state_.feedback.size(); ++g) {
    GroupFeedback& fb = state_.feedback[g];
    fb.tuner.record(now, std::exchange(fb.step_demoted, 0), std::exchange(fb.step_misdemoted, 0));
  }
  export_feedback(telemetry);
  telemetry.set_hot_bytes(hot_bytes_per_node(state_, now));
  export_pinned(state_.targets, state_.config.config.groups, now, telemetry);
  if (recording_) recording_->flush();
}

Result<void> Controller::start_recording(const std::filesystem::path& path, RecordingLimits limits,
                                         TimeNs now) {
  if (recording_open()) {
    return fail(fmt::format("a recording is running already ({}): stop it first",
                            recording_->path().string()),
                EBUSY);
  }
  auto w = RecordingWriter::create(path, limits, now);
  if (!w) return std::unexpected(w.error());
  recording_ = std::move(*w);
  recorded_targets_.clear();
  RecStart start{.now = now, .mover = deps_.mover != nullptr};
  for (const auto& s : deps_.sources) start.sources.push_back(s.source->kind());
  if (deps_.mover) start.mover_name = std::string(deps_.mover->name());
  write_record(std::move(start), now);
  spdlog::info("recording to {} (at most {} bytes, {} s)", path.string(), limits.max_bytes,
               limits.max_duration / 1'000'000'000);
  return {};
}

void Controller::stop_recording() {
  if (!recording_open()) return;
  recording_->close("stopped");
  spdlog::info("recording {} stopped: {} records, {} bytes", recording_->path().string(),
               recording_->records(), recording_->bytes());
}

void Controller::write_record(const Record& r, TimeNs now) {
  if (!recording_open()) return;  // stopped at a limit meanwhile
  if (!recording_->write(r, now)) {
    spdlog::info("recording {} stopped: {}", recording_->path().string(),
                 recording_->stopped_because());
  }
}

// Targets that joined (their process facts, for the config's selectors), and
// tracked mappings and thread counts that changed since the recording last said.
void Controller::rec_targets(TimeNs now) {
  if (!recording_open()) return;
  RecTargets pids;
  for (const auto& [pid, t] : state_.targets.all()) {
    pids.pids.push_back(pid);
    auto it = recorded_targets_.find(pid);
    if (it != recorded_targets_.end() && it->second.first == t.vmas &&
        it->second.second == t.threads) {
      continue;
    }
    RecTarget target{.info = {.pid = pid, .comm = t.comm}, .vmas = t.vmas, .threads = t.threads};
    if (auto info = read_process(deps_.paths, pid)) target.info = std::move(*info);
    write_record(std::move(target), now);
    recorded_targets_[pid] = {t.vmas, t.threads};
  }
  std::erase_if(recorded_targets_, [&](const auto& kv) { return !state_.targets.find(kv.first); });
  write_record(std::move(pids), now);
}

void Controller::rec_residency(Pid pid, bool full, const PageMap& map, TimeNs now) {
  if (!recording_open()) return;
  RecResidency r{.pid = pid, .full = full, .huge_blocks = map.huge_blocks};
  r.runs.reserve(map.runs.size());
  for (const auto& run : map.runs) r.runs.push_back({.range = run.range, .node = run.node});
  write_record(std::move(r), now);
}

// The groups' feedback as metrics (totals kept in the loop state, set each step).
void Controller::export_feedback(Telemetry& telemetry) const {
  for (std::size_t g = 0; g < state_.feedback.size(); ++g) {
    const GroupFeedback& f = state_.feedback[g];
    const std::string& name = state_.config.config.groups[g].name;
    const MetricLabels group{{"group", name}};
    const auto d = [](std::uint64_t v) { return static_cast<double>(v); };
    telemetry.set("kvtier_demoted_bytes_total", group, d(f.demoted_bytes));
    telemetry.set("kvtier_promoted_bytes_total", {{"group", name}, {"by", "kvtier"}},
                  d(f.promoted_bytes));
    telemetry.set("kvtier_promoted_bytes_total", {{"group", name}, {"by", "kernel"}},
                  d(f.kernel_promoted_bytes));
    telemetry.set("kvtier_misdemoted_bytes_total", group, d(f.misdemoted_bytes));
    telemetry.set("kvtier_reactivated_bytes_total", group, d(f.reactivated_bytes));
    telemetry.set("kvtier_slow_tier_touches_total", group, d(f.slow_touches));
    telemetry.set("kvtier_misdemotion_ratio", group, f.tuner.ratio());
    telemetry.set("kvtier_effective_cold_age_seconds", group, d(f.tuner.effective()) / 1e9);
    export_group_promotion(f, name, telemetry);
  }
}

}  // namespace kvtier::agent
