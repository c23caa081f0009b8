#pragma once
// The kernel's tiering knobs as the loop keeps them: the config's [tiering]
// applied once after start, at every reload and when "auto"'s promote_threshold
// would now resolve otherwise; the NUMA scan paced to max_hint_faults_per_sec;
// the host's values put back at shutdown. What could not be set is kept as the
// error (status shows it) and the loop runs on without it.

#include <memory>

#include "agent/host/numa_tiering.hpp"
#include "agent/loop/loop_state.hpp"

namespace kvtier::agent {

class TieringControl {
 public:
  // Null `tiering`: the knobs are left alone (tests, replay).
  TieringControl(std::unique_ptr<KernelTiering> tiering, LoopState& state);
  // Applies [tiering] if it is not yet, or if a return watch came or went
  // (`watch`: one runs now) while promote_threshold is "auto".
  void sync(bool watch);
  // Keeps the host's hint faults near max_hint_faults_per_sec.
  void pace(TimeNs now);
  // Puts the host's values back.
  void restore();
  [[nodiscard]] bool present() const { return tiering_ != nullptr; }

 private:
  void apply(bool watch);

  std::unique_ptr<KernelTiering> tiering_;
  LoopState& s_;
};

}  // namespace kvtier::agent
