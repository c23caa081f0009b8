#pragma once
// kvtierd's control loop. One step() runs six phases (LoopPhase, loop_state.hpp:
// the names its CPU time is billed under), each handing its result back to the
// Controller through the LoopState: discover (topology, targets, sources told
// their pids, mappings tracked), sources (Ingest: what every source saw goes into
// the targets' heat tables), residency (ResidencyPhase: where every tracked page
// is, and which are huge), plan (PlanPhase: policy::plan within the token
// bucket), move (Dispatcher: the plan's moves to the mover, and their accounting;
// then GroupPromoter's promotions by co-access group) and record (a heatmap row,
// the Feedback, the Recorder's flush). Between steps the promotion tick
// (PromotionTick) promotes what was accessed on a slow node. The kernel's
// tiering knobs are TieringControl's. Every side effect sits behind an injected
// piece (sources, mover, residency reader, HostPaths), so tests drive step() with
// fakes and the guest tests drive it for real. What the loop knows is its
// LoopState, which the views (views.hpp) read.

#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "agent/host/host_paths.hpp"
#include "agent/host/huge_pages.hpp"
#include "agent/host/numa_tiering.hpp"
#include "agent/host/residency.hpp"
#include "agent/loop/dispatcher.hpp"
#include "agent/loop/feedback.hpp"
#include "agent/loop/group_promoter.hpp"
#include "agent/loop/ingest.hpp"
#include "agent/loop/loop_state.hpp"
#include "agent/loop/plan_phase.hpp"
#include "agent/loop/promotion_tick.hpp"
#include "agent/loop/recorder.hpp"
#include "agent/loop/recording.hpp"
#include "agent/loop/residency_phase.hpp"
#include "agent/loop/shared_pools.hpp"
#include "agent/loop/tiering_control.hpp"
#include "agent/movers/mover.hpp"
#include "agent/sources/bpf_events.hpp"
#include "agent/sources/hotness_source.hpp"
#include "agent/telemetry/telemetry.hpp"
#include "policy/budget.hpp"
#include "policy/config.hpp"
#include "policy/heat.hpp"
#include "policy/planner.hpp"
#include "policy/rules.hpp"

namespace kvtier::agent {

// What one step is told: kvtierd builds it from the shell's DaemonHooks::step
// and ::promote arguments, so the loop does not include the shell.
struct StepContext {
  TimeNs now = 0;  // CLOCK_MONOTONIC
  // Paused by an operator: observe (collect heat, plan) but move nothing.
  bool paused = false;
};

struct ControllerDeps {
  HostPaths paths;
  // Started at the first step, each told the targets, drained at every step.
  // Empty: no source could run; heat is unknown, so nothing is demoted.
  std::vector<LoopSource> sources;
  // Null: observe-only (no demotion target, or no mover wanted).
  std::unique_ptr<Mover> mover;
  std::string observe_reason;
  // The sources the kernel refused (kernel_refusals.hpp): status says so.
  std::vector<SourceRefusal> refused_sources;
  // Where each tracked page is and which are huge (move_pages status queries,
  // pagemap + kpageflags).
  ResidencyReader residency{system_move_pages(), 4096, std::make_shared<KpageflagsHugeProbe>()};
  // kvtierd's own pid is never a target.
  Pid self = 0;
  // How new and ended processes are found: a process watcher (exec, fork,
  // exit) feeds on_process_events(), and /proc is read in full only every
  // kRescanEvery (a consistency check: lost events, a cmdline rewritten
  // without exec); else `discovery` says why not, and /proc is read every step.
  bool process_events = false;
  std::string discovery;
  // The kernel's tiering knobs: set from the config's [tiering] at the first
  // step and at every reload, put back at shutdown. Null: left alone (tests).
  std::unique_ptr<KernelTiering> tiering;
  // The NUMA topology and free memory now. Null: read from paths' sysfs.
  std::function<Result<policy::Topology>()> topology;
  // The shared pools the targets map (TargetSet::track_vmas keeps them); the
  // residency reader's and the mover's move_pages may reach a pool's pages
  // through them (through_sharers).
  std::shared_ptr<SharedPools> pools = std::make_shared<SharedPools>();
  // The loop thread's CPU clock (LoopState::cpu). Null: CLOCK_THREAD_CPUTIME_ID.
  std::function<TimeNs()> thread_cpu;
  // The loop thread also serves the control socket: a dispatch hands the mover
  // at most move_piece_bytes a call (cut at 2 MiB boundaries) and, once it has
  // moved for move_slice_ns by move_clock (null: monotonic), leaves the rest of
  // the plan to the next step, so a status request waits at most a slice and a
  // piece even on a node that takes seconds a MiB.
  std::uint64_t move_piece_bytes = 4ULL << 20;
  TimeNs move_slice_ns = 500'000'000;
  std::function<TimeNs()> move_clock;
};

// With a process watcher, how often /proc is still read in full.
inline constexpr TimeNs kRescanEvery = 30'000'000'000;

// Charges the loop thread's CPU time to the loop's phases in turn: each
// charge() gives a phase what the thread used since the last one.
class PhaseClock {
 public:
  PhaseClock(const std::function<TimeNs()>& cpu, LoopCpu& into)
      : cpu_(cpu), into_(into), mark_(cpu()) {}
  void charge(LoopPhase phase) {
    const TimeNs now = cpu_();
    into_[static_cast<std::size_t>(phase)] += now > mark_ ? now - mark_ : 0;
    mark_ = now;
  }

 private:
  const std::function<TimeNs()>& cpu_;
  LoopCpu& into_;
  TimeNs mark_;
};

class Controller {
 public:
  Controller(policy::CompiledConfig config, ControllerDeps deps, TimeNs now);
  ~Controller();
  Controller(const Controller&) = delete;
  Controller& operator=(const Controller&) = delete;

  // One iteration; `ctx.paused` plans but moves nothing.
  Result<void> step(const StepContext& ctx, Telemetry& telemetry);
  // Between steps (DaemonHooks::promote): what page-level evidence says was
  // accessed on a slow node is promoted now; nothing else is planned.
  Result<void> promote_step(const StepContext& ctx, Telemetry& telemetry);
  // Readable when memory kvtier demoted is touched (the faults source's return
  // watch, agent/sources/return_watch.hpp); -1 without one.
  [[nodiscard]] int wake_fd() const;
  // A new configuration (already validated). Targets are re-matched at once
  // (new processes join at the next step); a target that stays selected keeps
  // its heat unless its group's half-life changed. The token bucket keeps its
  // level (clamped to the new burst): a reload grants no burst of moves.
  void apply_config(policy::CompiledConfig config, TimeNs now);
  // New hotness sources (a reload that changed [sources]): the running ones
  // stop now, the new ones start at the next step with the targets. Heat
  // stays unless its granularity changes (DAMON regions alone, or pages).
  // `refused`: the reload's probe of the sources, the ones the kernel refused now.
  void replace_sources(std::vector<LoopSource> sources, std::vector<SourceRefusal> refused = {});
  // Processes that started, exec'd or ended (the process watcher): targets
  // join and leave now, and the running sources are told at once.
  void on_process_events(std::span<const ProcEvent> events);
  // Detaches the sources (BPF programs, DAMON contexts). Idempotent.
  void shutdown();

  // The recording of what every step sees (recording.hpp): started, stopped and
  // shown by the control socket's record command.
  [[nodiscard]] Recorder& recorder() { return recorder_; }

  [[nodiscard]] const LoopState& state() const { return state_; }

 private:
  Result<void> run_step(const StepContext& ctx, Telemetry& telemetry, PhaseClock& clock);
  Result<void> run_promote_step(const StepContext& ctx, Telemetry& telemetry, PhaseClock& clock);
  // The first phase of step(); the others are the parts' (run_step says the order).
  Result<void> discover(TimeNs now, Telemetry& telemetry);

  // Each job of the loop is a part of its own (its file says what it does); the
  // Controller runs them in order and hands each phase's result to the next
  // through state_.
  ControllerDeps deps_;
  LoopState state_;
  policy::TokenBucket bucket_;
  Recorder recorder_{state_};
  Feedback feedback_{state_};
  Ingest ingest_;
  TieringControl tiering_;
  ResidencyPhase residency_;
  PlanPhase plan_{state_, bucket_, recorder_};
  Dispatcher dispatcher_;
  PromotionTick tick_;
  GroupPromoter groups_{{state_, plan_, dispatcher_, feedback_}};
  // apply_config() dropped targets: the sources must hear of it.
  bool targets_changed_ = false;
  // The topology as the last step read it: the promotion tick refreshes the
  // nodes' memory in state_.topology between steps, and a change the tick saw
  // first must still be one the step reports (it was lost half the time).
  policy::Topology stepped_topology_;
};

}  // namespace kvtier::agent
