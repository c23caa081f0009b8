#pragma once
// The residency phase: where every tracked page is (the heat table's nodes),
// which 2 MiB blocks are huge pages (planned whole from then on), and bytes per
// node for telemetry. A full read walks every tracked page (a move_pages status
// query each, the loop's biggest cost), so it happens every kFullResidencyEvery;
// in between, only the pages sampled since are read again (the kernel may have
// promoted them), and kvtier's own moves are known from the mover (Dispatcher).

#include <string>

#include "agent/host/residency.hpp"
#include "agent/loop/feedback.hpp"
#include "agent/loop/loop_state.hpp"
#include "agent/loop/recorder.hpp"
#include "agent/sources/return_watch.hpp"
#include "agent/telemetry/telemetry.hpp"

namespace kvtier::agent {

// How often every tracked page's node is read (between, only pages sampled).
inline constexpr TimeNs kFullResidencyEvery = 30'000'000'000;

class ResidencyPhase {
 public:
  ResidencyPhase(ResidencyReader& reader, LoopState& state, Recorder& recorder, Feedback& feedback)
      : reader_(reader), s_(state), recorder_(recorder), feedback_(feedback) {}
  // Every target's residency, full or of its sampled pages. `watch` (null: none)
  // is armed on whatever a full read finds on a slow node.
  void read(TimeNs now, Telemetry& telemetry, ReturnWatch* watch);
  // The node of every page of `t` sampled since the last read (the kernel may
  // have promoted it in the fault path).
  void refresh_touched(Target& t, TimeNs now, std::string* error);

 private:
  void read_full(Target& t, TimeNs now, ReturnWatch* watch, std::string* error);

  ResidencyReader& reader_;
  LoopState& s_;
  Recorder& recorder_;
  Feedback& feedback_;
};

}  // namespace kvtier::agent
