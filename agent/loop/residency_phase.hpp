#pragma once
// The residency phase: where every tracked page is (the heat table's nodes),
// which 2 MiB blocks are huge pages (planned whole from then on), and bytes per
// node for telemetry. A full read walks every tracked page (a move_pages status
// query each, the loop's biggest cost), so it happens once per target; after
// it, a check every kFullResidencyEvery reads what the evidence makes worth
// reading (residency_check.hpp), each step the pages sampled since (the kernel
// may have promoted them) and the ranges to read again; kvtier's own moves are
// known from the mover (Dispatcher).

#include <string>
#include <utility>

#include "agent/host/host_paths.hpp"
#include "agent/host/residency.hpp"
#include "agent/loop/feedback.hpp"
#include "agent/loop/loop_state.hpp"
#include "agent/loop/recorder.hpp"
#include "agent/sources/return_watch.hpp"
#include "agent/telemetry/telemetry.hpp"

namespace kvtier::agent {

// How often the residency check runs (residency_check.hpp).
inline constexpr TimeNs kFullResidencyEvery = 30'000'000'000;

class ResidencyPhase {
 public:
  // `host`: where /proc/vmstat is (the kernel's own moves, for the check).
  ResidencyPhase(ResidencyReader& reader, HostPaths host, LoopState& state, Recorder& recorder,
                 Feedback& feedback)
      : reader_(reader),
        host_(std::move(host)),
        s_(state),
        recorder_(recorder),
        feedback_(feedback) {}
  // Every target's residency: full the first time, then the check, the ranges to
  // read again and its sampled pages. `watch` (null: none) is armed on whatever a
  // full read finds, or a check's table has, on a slow node.
  void read(TimeNs now, Telemetry& telemetry, ReturnWatch* watch);
  // The node of every page of `t` sampled since the last read (the kernel may
  // have promoted it in the fault path).
  void refresh_touched(Target& t, TimeNs now, std::string* error);

 private:
  void read_full(Target& t, TimeNs now, ReturnWatch* watch, std::string* error);
  // The check (`check`) and the ranges to read again (residency_check.hpp).
  void read_some(Target& t, TimeNs now, bool check, ReturnWatch* watch, std::string* error);
  // Arms `watch` on the runs of `map` on a slow node for `t`.
  void arm_slow(const Target& t, const PageMap& map, ReturnWatch& watch) const;

  ResidencyReader& reader_;
  HostPaths host_;
  LoopState& s_;
  Recorder& recorder_;
  Feedback& feedback_;
};

}  // namespace kvtier::agent
