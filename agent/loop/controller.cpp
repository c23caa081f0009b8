#include "agent/loop/controller.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <expected>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "agent/host/clock.hpp"
#include "agent/host/self_memory.hpp"
#include "agent/host/topology_reader.hpp"
#include "agent/loop/feedback.hpp"
#include "agent/loop/ingest.hpp"
#include "agent/loop/kernel_refusals.hpp"
#include "agent/loop/loop_state.hpp"
#include "agent/loop/pinned_tracker.hpp"
#include "agent/loop/recorder.hpp"
#include "agent/loop/recording.hpp"
#include "agent/loop/target_set.hpp"
#include "agent/loop/topology_watch.hpp"
#include "agent/loop/views.hpp"
#include "agent/sources/bpf_events.hpp"
#include "agent/sources/return_watch.hpp"
#include "agent/telemetry/telemetry.hpp"
#include "policy/config.hpp"
#include "policy/error.hpp"
#include "policy/planner.hpp"
#include "policy/topology.hpp"
#include "policy/types.hpp"

namespace kvtier::agent {
namespace {

Result<void> read_topology_now(const ControllerDeps& deps, LoopState& s) {
  auto topo = deps.topology ? deps.topology() : read_topology(deps.paths);
  if (!topo) return std::unexpected(topo.error());
  s.topology = std::move(*topo);
  return {};
}

// Between cycles only free memory changes that matters to a promotion: read
// that (refresh_node_memory), and the whole topology if a node went away.
Result<void> refresh_memory_now(const ControllerDeps& deps, LoopState& s) {
  if (deps.topology || s.topology.nodes.empty()) return read_topology_now(deps, s);
  if (auto ok = refresh_node_memory(deps.paths, s.topology); ok) return ok;
  return read_topology_now(deps, s);
}

// Without a hotness source every page looks idle: never demote blindly.
bool may_move(const ControllerDeps& deps, const LoopState& s, const StepContext& ctx) {
  // Every source runs, or stands by (DAMON while page-level evidence sees every node).
  const bool sources_run =
      !s.sources.empty() && std::ranges::all_of(s.sources, [](const SourceStatus& src) {
        return src.started || !src.standby.empty();
      });
  return deps.mover && sources_run && !ctx.paused;
}

// The return watch's counts and the loop's CPU by phase, as metrics.
void export_cpu(LoopState& s, const ReturnWatch* w, Telemetry& telemetry) {
  s.return_watch = w != nullptr ? std::optional(w->stats()) : std::nullopt;
  if (s.return_watch) {
    const ReturnWatchStats& r = *s.return_watch;
    for (const auto& [event, n] : {std::pair{"armed", r.armed}, std::pair{"returned", r.returns},
                                   std::pair{"failed", r.failed}}) {
      telemetry.set("kvtier_return_watch_chunks_total", {{"event", event}}, static_cast<double>(n));
    }
  }
  for (std::size_t i = 0; i < kLoopPhases; ++i) {
    telemetry.set("kvtier_loop_cpu_seconds_total", {{"phase", kLoopPhaseNames[i]}},
                  static_cast<double>(s.cpu[i]) / 1e9);
  }
  telemetry.set("process_cpu_seconds_total", {}, process_cpu_seconds());
}

// The record phase: one heatmap row per target, the end of the feedback's step,
// the gauges, the recording's flush.
void record_phase(LoopState& s, Feedback& feedback, Recorder& recorder, TimeNs now,
                  Telemetry& telemetry) {
  for (auto& [pid, t] : s.targets.all()) {
    t.history.push_back(bin_heat(t, kHistoryBins, now, &t.row_cache));
    while (t.history.size() > kHistorySteps) t.history.pop_front();
  }
  feedback.end_step(now, telemetry);
  telemetry.set_hot_bytes(hot_bytes_per_node(s, now));
  export_pinned(s.targets, s.config.config.groups, now, telemetry);
  recorder.flush();
}

}  // namespace

Controller::Controller(policy::CompiledConfig config, ControllerDeps deps, TimeNs now)
    : deps_(std::move(deps)),
      state_(std::move(config), TargetSet(deps_.paths, deps_.self, deps_.pools)),
      bucket_(state_.config.config.limits.migrate_rate, state_.config.config.limits.migrate_burst,
              now),
      ingest_(std::move(deps_.sources), state_, recorder_),
      tiering_(std::move(deps_.tiering), state_),
      residency_(deps_.residency, deps_.paths, state_, recorder_, feedback_),
      dispatcher_({state_, bucket_, recorder_, feedback_},
                  {deps_.move_piece_bytes, deps_.move_slice_ns, deps_.move_clock}),
      tick_(state_, residency_, feedback_) {
  if (deps_.mover) state_.mover = deps_.mover->name();
  if (!deps_.thread_cpu) deps_.thread_cpu = thread_cpu_now;
  state_.observe_reason = deps_.observe_reason;
  state_.refused_sources = deps_.refused_sources;
  state_.discovery = deps_.discovery;
  state_.process_watcher = deps_.process_events;
  state_.budget_bytes = bucket_.available();
  feedback_.reset();
  ingest_.teach(&groups_);
}

Controller::~Controller() {
  shutdown();
}

void Controller::shutdown() {
  tiering_.restore();
  ingest_.stop();
}

void Controller::on_process_events(std::span<const ProcEvent> events) {
  bool changed = false;
  const auto params = [this](std::size_t g) { return ingest_.heat_params(g); };
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
  if (auto ok = ingest_.start(true); !ok) spdlog::warn("{}", ok.error().message);
}

void Controller::replace_sources(std::vector<LoopSource> sources,
                                 std::vector<SourceRefusal> refused) {
  ingest_.replace(std::move(sources));
  state_.refused_sources = std::move(refused);
  targets_changed_ |= state_.targets.rematch(
      state_.config, [this](std::size_t g) { return ingest_.heat_params(g); });
  targets_changed_ = true;  // the new sources hear of the targets at the next step
}

void Controller::apply_config(policy::CompiledConfig config, TimeNs now) {
  state_.config = std::move(config);
  const auto& limits = state_.config.config.limits;
  bucket_.reconfigure(limits.migrate_rate, limits.migrate_burst, now);
  state_.budget_bytes = bucket_.available();
  // Re-match now rather than at the next step: until then `status`, `targets`
  // and `explain` index the new config's groups with each target's group.
  targets_changed_ |= state_.targets.rematch(
      state_.config, [this](std::size_t g) { return ingest_.heat_params(g); });
  feedback_.reset();
  state_.tiering_applied = false;     // the next step applies [tiering] again
  state_.scan_pacing.period.reset();  // ... with its configured scan periods
}

Result<void> Controller::step(const StepContext& ctx, Telemetry& telemetry) {
  PhaseClock clock(deps_.thread_cpu, state_.cpu);
  auto ok = run_step(ctx, telemetry, clock);
  export_cpu(state_, ingest_.return_watch(), telemetry);
  // Once a step, not at every promotion tick: a file read for a slow gauge.
  telemetry.set("process_resident_memory_bytes", {}, static_cast<double>(resident_bytes()));
  return ok;
}

Result<void> Controller::run_step(const StepContext& ctx, Telemetry& telemetry, PhaseClock& clock) {
  ++state_.steps;
  recorder_.rec(ctx.now, [&] {
    return RecStep{.now = ctx.now, .kind = StepKind::kStep, .paused = ctx.paused};
  });
  tiering_.sync(ingest_.return_watch() != nullptr);
  tiering_.pace(ctx.now);
  auto found = discover(ctx.now, telemetry);
  clock.charge(LoopPhase::kDiscover);
  if (!found) return found;
  ingest_.collect(ctx.now, telemetry);
  clock.charge(LoopPhase::kSources);
  residency_.read(ctx.now, telemetry, ingest_.active_watch());
  clock.charge(LoopPhase::kResidency);
  plan_.plan(ctx.now, telemetry);
  clock.charge(LoopPhase::kPlan);
  Mover* mover = may_move(deps_, state_, ctx) ? deps_.mover.get() : nullptr;
  if (mover != nullptr) {
    dispatcher_.dispatch(*mover, state_.last_plan.moves, ctx.now, telemetry,
                         ingest_.active_watch());
  }
  groups_.promote(ctx.now, telemetry, mover, ingest_.active_watch());
  clock.charge(LoopPhase::kMove);
  record_phase(state_, feedback_, recorder_, ctx.now, telemetry);
  clock.charge(LoopPhase::kRecord);
  // The sources may have started (or stopped) in this step.
  tiering_.sync(ingest_.return_watch() != nullptr);
  state_.wake_blocked = false;
  return {};
}

Result<void> Controller::discover(TimeNs now, Telemetry& telemetry) {
  const policy::Topology before =
      stepped_topology_.nodes.empty() ? state_.topology : stepped_topology_;
  if (auto ok = read_topology_now(deps_, state_); !ok) return ok;
  stepped_topology_ = state_.topology;
  note_topology_changes(before, state_, now, telemetry);
  recorder_.rec(now, [&] { return RecTopology{.topology = state_.topology}; });
  telemetry.set_node_memory(state_.topology);
  telemetry.set("kvtier_observe_only", {}, deps_.mover ? 0 : 1);
  export_refused_sources(state_.refused_sources, telemetry);
  bool changed = false;
  if (!deps_.process_events || !state_.last_rescan || now - *state_.last_rescan >= kRescanEvery) {
    changed = state_.targets.discover(state_.config,
                                      [this](std::size_t g) { return ingest_.heat_params(g); });
    if (changed && deps_.process_events && state_.last_rescan) {
      ++state_.rescan_corrections;
      spdlog::info("the /proc rescan changed the targets: the process watcher missed an event");
    }
    state_.last_rescan = now;
  }
  if (auto ok = ingest_.start(changed || std::exchange(targets_changed_, false)); !ok) return ok;
  std::uint64_t host_bytes = 0;
  for (const auto& n : state_.topology.nodes) host_bytes += n.mem_total_bytes;
  state_.targets.track_vmas(now, host_bytes);
  update_scan_coverage(state_, now);
  refresh_pinned(state_.targets, deps_.paths, now);
  recorder_.targets(state_.targets, deps_.paths, now);
  return ingest_.tell_ranges();
}

// Between steps: page-level evidence in, and what it says was accessed on a
// slow node goes back to DRAM now, by the same rule and within the same limits
// as the step's plan (policy::plan_promotions), without planning anything else.
Result<void> Controller::promote_step(const StepContext& ctx, Telemetry& telemetry) {
  if (state_.steps == 0 || !may_move(deps_, state_, ctx)) return {};
  PhaseClock clock(deps_.thread_cpu, state_.cpu);
  auto ok = run_promote_step(ctx, telemetry, clock);
  export_cpu(state_, ingest_.return_watch(), telemetry);
  return ok;
}

// When the last plan's spare list ran out while pages accessed on a slow node
// wait for room (a burst of them), the tick plans again, as a step would, rather
// than leave them there until the next step: since that plan, more DRAM pages may
// have become idle long enough to give way.
Result<void> Controller::run_promote_step(const StepContext& ctx, Telemetry& telemetry,
                                          PhaseClock& clock) {
  const TimeNs now = ctx.now;
  recorder_.rec(
      now, [&] { return RecStep{.now = now, .kind = StepKind::kPromote, .paused = ctx.paused}; });
  ingest_.collect(now, telemetry);
  clock.charge(LoopPhase::kSources);
  auto topo = refresh_memory_now(deps_, state_);
  clock.charge(LoopPhase::kDiscover);
  if (!topo) return topo;
  recorder_.rec(now, [&] { return RecTopology{.topology = state_.topology}; });
  const policy::Snapshot snap = plan_.snapshot(now);
  const std::vector<policy::PromotionCandidate> cands = tick_.candidates(snap, now, telemetry);
  clock.charge(LoopPhase::kResidency);
  if (cands.empty()) return {};
  bool spent = false;
  const Plan p = policy::plan_promotions(snap, cands, tick_.spare_units(snap, cands, now, &spent));
  recorder_.rec(now, [&] { return RecPlan{.plan = p}; });
  clock.charge(LoopPhase::kPlan);
  ReturnWatch* const watch = ingest_.active_watch();
  dispatcher_.dispatch(*deps_.mover, p.moves, now, telemetry, watch);
  groups_.promote(now, telemetry, deps_.mover.get(), watch);
  clock.charge(LoopPhase::kMove);
  if (p.waiting_bytes > 0 && spent && std::exchange(state_.replan_when_spent, false)) {
    telemetry.add("kvtier_promotion_replans_total", {});
    plan_.plan(now, telemetry);
    clock.charge(LoopPhase::kPlan);
    dispatcher_.dispatch(*deps_.mover, state_.last_plan.moves, now, telemetry, watch);
    clock.charge(LoopPhase::kMove);
  } else if (p.waiting_bytes > 0 && spent) {
    // No room left until the next step demotes: more wake-ups would only plan
    // the same wait again (the interval's tick still runs).
    state_.wake_blocked = true;
  }
  recorder_.flush();
  return {};
}

int Controller::wake_fd() const {
  const ReturnWatch* w = state_.wake_blocked ? nullptr : ingest_.active_watch();
  return w != nullptr ? w->epoll_fd() : -1;
}

}  // namespace kvtier::agent
