#pragma once
// The control loop's state, as its views (views.hpp) read it: the config, the
// topology of the last step, the targets, the sources and the mover, the
// budget, the last plan and what moved. The Controller writes it; everything
// else only reads it.

#include <array>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "agent/host/numa_tiering.hpp"
#include "agent/loop/kernel_refusals.hpp"
#include "agent/loop/target_set.hpp"
#include "agent/sources/return_watch.hpp"
#include "agent/sources/source_registry.hpp"
#include "policy/coaccess.hpp"
#include "policy/cold_age_tuner.hpp"
#include "policy/config.hpp"
#include "policy/planner.hpp"
#include "policy/topology.hpp"
#include "policy/types.hpp"

namespace kvtier::agent {

// One hotness source the loop runs.
struct SourceStatus {
  SourceKind kind = SourceKind::kPmu;
  std::string reason;  // why it runs (the registry's one line)
  bool started = false;
  std::string error;    // the last start, set_targets or collect error; "" when none
  std::string standby;  // why it is stopped though it could run (DAMON); "" when not
  // The pids it was last told to watch: every target's, or, where it would
  // stand by, only those the NUMA scan does not cover (Target::scan_blind).
  std::vector<Pid> pids;
};

// Where the control loop's thread spends its CPU time (its own clock, the
// kernel's work in its syscalls included), for `kvtierctl status` and the
// kvtier_loop_cpu_seconds_total counter. The sources' own threads and the
// control socket's are not in it.
enum class LoopPhase : std::uint8_t {
  kDiscover,   // topology, targets, mappings, sources told their pids and ranges
  kSources,    // what every source collected, into the heat tables (the dirty scan too)
  kResidency,  // where the tracked pages are (move_pages status queries)
  kPlan,       // the plan, and the promotion ticks' exchange
  kMove,       // moving pages (the mover: move_pages(2))
  kRecord,     // the step's heatmap row, the feedback, the gauges, the recording's flush
};
inline constexpr std::size_t kLoopPhases = 6;
// The phases' one set of names: the label of kvtier_loop_cpu_seconds_total, the
// keys of the status view's loop_seconds_by_phase, docs/architecture.md's table.
inline constexpr std::array<const char*, kLoopPhases> kLoopPhaseNames = {
    "discover", "sources", "residency", "plan", "move", "record"};
using LoopCpu = std::array<TimeNs, kLoopPhases>;

// The mis-demotion feedback of one group, and what the loop counted for it.
struct GroupFeedback {
  explicit GroupFeedback(const policy::GroupPolicy& p)
      : tuner(p.cold_age.value_or(0), p.cold_age_max, p.misdemotion_target),
        group_rate(p.group_hit_rate_min) {}
  policy::ColdAgeTuner tuner;
  // Promotion by co-access group (group_promoter.hpp): bytes promoted by group
  // (not in promoted_bytes), the trials' verdicts (hits and wastes, promoted or
  // in the shadow), the rate that switches it, and the groups known now.
  policy::GroupHitRate group_rate;
  std::uint64_t group_promoted_bytes = 0;
  std::uint64_t group_hit_bytes = 0;
  std::uint64_t group_wasted_bytes = 0;
  std::uint64_t group_trials = 0;
  std::uint64_t group_shadow_trials = 0;
  std::uint64_t groups_known = 0;
  std::uint64_t groups_memory_bytes = 0;
  std::uint64_t demoted_bytes = 0;   // kvtier's demotions
  std::uint64_t promoted_bytes = 0;  // kvtier's promotions
  std::uint64_t misdemoted_bytes = 0;
  std::uint64_t reactivated_bytes = 0;
  std::uint64_t kernel_promoted_bytes = 0;  // touched on a slow node, then found in DRAM
  std::uint64_t slow_touches = 0;           // page-level samples of slow-tier pages
  // This step's, for the tuner.
  std::uint64_t step_demoted = 0;
  std::uint64_t step_misdemoted = 0;
};

struct LoopState {
  LoopState(policy::CompiledConfig cfg, TargetSet set)
      : config(std::move(cfg)), targets(std::move(set)) {}

  policy::CompiledConfig config;
  policy::Topology topology;  // as read at the last step
  TargetSet targets;
  std::vector<SourceStatus> sources;  // empty: no source could run, heat is unknown
  // Sources the kernel refused (DAMON busy, lockdown, no BTF), and the moves it
  // refused in part (pages busy, a promotion's ENOMEM): kernel_refusals.hpp.
  std::vector<SourceRefusal> refused_sources;
  MoveRefusals move_refusals;
  std::string mover;  // its name; empty: observe-only
  std::string observe_reason;
  std::uint64_t budget_bytes = 0;  // what the token bucket holds after the last step
  std::uint64_t steps = 0;
  Plan last_plan;
  // What the last step's plan could have demoted and left in DRAM (coldest
  // first): the promotion ticks exchange it for what waits on a slow node.
  std::vector<policy::SpareUnit> spare;
  // The last plan left a spare list: a promotion tick that uses it up while
  // pages accessed on a slow node wait for room plans again (once: a plan that
  // leaves no spare waits for the next step).
  bool replan_when_spent = false;
  MoveStats moved_total;
  // The loop thread's CPU time in each phase, since start.
  LoopCpu cpu{};
  // Whether moves happen (status): the moves of the last minute (time, bytes),
  // the last one's time (0: none yet), and the last node found full (-1: none).
  std::deque<std::pair<TimeNs, std::uint64_t>> recent_moves;
  TimeNs last_move_at = 0;
  int full_node = -1;
  TimeNs full_at = 0;
  // Nodes that were demotion targets and are not now (their memory offlined, the
  // node gone): node -> since when, and why (topology_watch.hpp). Empty again
  // once each is a target again.
  struct LostTarget {
    TimeNs since = 0;
    std::string reason;
  };
  std::map<int, LostTarget> lost_targets;
  std::uint64_t topology_changes = 0;   // changes seen since start, one log line each
  std::vector<GroupFeedback> feedback;  // one per group of the config
  // How targets are found (ControllerDeps::discovery), the watcher's events
  // taken, the last full /proc read, and the changes such reads found that
  // the watcher had missed.
  std::string discovery;
  bool process_watcher = false;
  std::uint64_t process_events = 0;
  std::optional<TimeNs> last_rescan;
  std::uint64_t rescan_corrections = 0;
  // The kernel's tiering knobs: what kvtierd changed ("FILE: OLD -> NEW" lines),
  // the last error setting them ("" when none), and their values now.
  std::vector<std::string> tiering_changes;
  std::string tiering_error;
  TieringKnobValues tiering;
  bool tiering_applied = false;
  // Whether a return watch ran when [tiering] was last applied: "auto"'s
  // promote_threshold follows it (the sources start after the first apply).
  bool tiering_saw_watch = false;
  // The kernel promotes in the fault path: promote_threshold is not "kvtier",
  // as last resolved (policy::Snapshot::fault_path_promotions).
  bool fault_path_promotions = true;
  // A promotion tick found no room for what waits (the spare spent, the replan
  // done): no wake-ups (Controller::wake_fd) until the next step.
  bool wake_blocked = false;
  // [tiering] max_hint_faults_per_sec: the host's hint faults at the last step
  // (when, how many), their rate since the one before, and the scan period kvtierd
  // set in their place (nullopt: the configured one).
  struct ScanPacing {
    std::optional<std::pair<TimeNs, std::uint64_t>> last;
    std::optional<double> faults_per_sec;
    std::optional<TimeNs> period;
  } scan_pacing;
  bool kernel_tiering = false;  // a tiering handle reads the kernel's knobs into `tiering`
  // The faults source's return watch, as of the last step or tick (nullopt: none runs).
  std::optional<ReturnWatchStats> return_watch;

  // Whether normal NUMA balancing (kernel.numa_balancing bit 1) is on, so the
  // hint faults see DRAM pages too: the kernel's value as read at the last
  // [tiering] apply; without a kernel to read (observe-only, replay), the
  // config's wish.
  [[nodiscard]] bool normal_balancing() const {
    if (kernel_tiering) {
      return tiering.numa_balancing && (*tiering.numa_balancing & kNumaBalancingNormal) != 0;
    }
    return config.config.tiering.numa_balancing == policy::NumaBalancingMode::kTiering;
  }

  // Whether the kernel unmaps pages on slow nodes at all (kernel.numa_balancing
  // bit 1 or 2), so the faults source sees NUMA hint faults; as read, or the
  // config's wish, as above.
  [[nodiscard]] bool any_balancing() const {
    if (kernel_tiering) {
      return tiering.numa_balancing &&
             (*tiering.numa_balancing & (kNumaBalancingNormal | kNumaBalancingTiering)) != 0;
    }
    return config.config.tiering.numa_balancing != policy::NumaBalancingMode::kKeep;
  }

  // Whether no running source sees target t's reads of its DRAM pages: DAMON
  // stands by because the hint faults see DRAM pages (normal balancing, the
  // faults source, no PMU samples), but the kernel's scan leaves a
  // single-threaded process's pages on the node it runs on mapped
  // (mm/mprotect.c), so reads there cause no hint fault.
  // A target the scan does not cover is watched by DAMON (Ingest::start).
  [[nodiscard]] bool dram_reads_unseen(const Target& t) const {
    return t.threads == 1 && !t.scan_blind &&
           dram_read_evidence(running_sources(), normal_balancing()) ==
               DramReadEvidence::kHintFaults;
  }

  // The kinds of the sources started now.
  [[nodiscard]] std::vector<SourceKind> running_sources() const {
    std::vector<SourceKind> out;
    for (const auto& s : sources) {
      if (s.started) out.push_back(s.kind);
    }
    return out;
  }

  // A move of `bytes` at `now`, remembered for a minute.
  void record_move(TimeNs now, std::uint64_t bytes) {
    if (bytes > 0) {
      recent_moves.emplace_back(now, bytes);
      last_move_at = now;
    }
    while (!recent_moves.empty() && recent_moves.front().first + kMoveWindow <= now) {
      recent_moves.pop_front();
    }
  }
  static constexpr TimeNs kMoveWindow = 60'000'000'000;

  // The effective cold age of every group now (the planner's Snapshot::cold_age).
  [[nodiscard]] std::vector<TimeNs> cold_ages() const {
    std::vector<TimeNs> out;
    out.reserve(feedback.size());
    for (const auto& f : feedback) out.push_back(f.tuner.effective());
    return out;
  }
};

}  // namespace kvtier::agent
