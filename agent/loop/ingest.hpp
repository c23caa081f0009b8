#pragma once
// The loop's hotness sources and the ingest phase: which sources run or stand by
// and which pids and ranges each watches, and what they collect, into the
// targets' heat tables. The sources' state (started, standby, error, pids) is
// LoopState::sources, index for index with the sources held here.

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "agent/loop/feedback.hpp"
#include "agent/loop/group_promoter.hpp"
#include "agent/loop/loop_state.hpp"
#include "agent/loop/recorder.hpp"
#include "agent/sources/hotness_source.hpp"
#include "agent/telemetry/telemetry.hpp"
#include "policy/heat.hpp"

namespace kvtier::agent {

// A hotness source the loop runs, known by its kind().
struct LoopSource {
  std::unique_ptr<HotnessSource> source;
  std::string reason;  // why it was chosen (the registry's one line)
};

class Ingest {
 public:
  Ingest(std::vector<LoopSource> sources, LoopState& state, Recorder& recorder);
  // The running sources stop, these take their place (they start at start()).
  void replace(std::vector<LoopSource> sources);
  // Starts the sources not running yet and tells every source that starts or
  // whose targets changed the pids to watch. Sources that may stand by (DAMON,
  // soft-dirty) come last: they stand by, stopped, while other evidence sees what
  // they would (standby_reason), and start again when it no longer does. An
  // error stops the step (the daemon logs it); the next step tries again.
  Result<void> start(bool targets_changed);
  // Sources that watch address ranges (DAMON) watch the mappings tracked.
  Result<void> tell_ranges();
  // Detaches the started sources (BPF programs, DAMON contexts).
  void stop();
  // The ingest phase: what every started source collected goes into the heat tables.
  void collect(TimeNs now, Telemetry& telemetry);
  // The heat table's parameters for a target of `group`: region granularity only
  // when every source reports regions (DAMON).
  [[nodiscard]] policy::HeatParams heat_params(std::size_t group) const;
  // The first started source's return watch, if any.
  [[nodiscard]] ReturnWatch* return_watch() const;
  // The return watch while kvtierd promotes at first touch itself: with the
  // kernel promoting in the fault path (LoopState::fault_path_promotions), a
  // wake-up would find the page promoted already, so none then.
  [[nodiscard]] ReturnWatch* active_watch() const;
  // Where page-level touches on a slow node also go: the targets' co-access
  // groups (group_promoter.hpp); null: nowhere.
  void teach(GroupPromoter* groups) { groups_ = groups; }

 private:
  void add_to_heat(const SourceBatch& batch);
  [[nodiscard]] std::vector<Pid> scan_blind_pids() const;
  [[nodiscard]] std::string not_needed(SourceKind kind) const;
  Result<void> start_one(std::size_t i, bool targets_changed, const std::vector<Pid>& all,
                         const std::vector<Pid>& blind);

  std::vector<LoopSource> sources_;
  LoopState& s_;
  Recorder& recorder_;
  GroupPromoter* groups_ = nullptr;
};

// A target's hint faults see its reads only once the kernel's NUMA scan has
// unmapped its pages, and the scan runs once per scan period of the process's
// own CPU time (task_tick_numa): a process that runs 3 ms a second is gone
// through about once every half minute at a 100 ms period. Where that is less
// often than once per its group's cold age, the faults' silence says nothing
// about its reads: it is scan-blind (Target::scan_blind), and the sources that
// would stand by watch it. It sees again below half its cold age (no flapping).
void update_scan_coverage(LoopState& s, TimeNs now);

}  // namespace kvtier::agent
