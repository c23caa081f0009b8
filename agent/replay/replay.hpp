#pragma once
// Replay: a recording (agent/loop/recording.hpp) fed back through the same
// Controller and planner with another configuration. No root, no guest: the
// recorded topology, targets, source batches and residency answers stand in
// for the host, and a simulated page table stands in for the kernel's.
//
// What is exact and what is estimated (docs/recording.md says it at length):
// with the recorded configuration every plan and move is the recorded one,
// byte for byte (the test asserts it). With another configuration the
// evidence is the recorded one (how the workload would have reacted to another
// placement is unknown); the replay's moves succeed fully unless they are the
// very moves the recording made (then they do what those did); a page the
// kernel moved in the recording (a residency answer that no recorded move
// explains) moves in the replay too; free memory per node is the recorded one
// plus what the replay placed differently.

#include <cstdint>
#include <string>
#include <vector>

#include "agent/loop/recording.hpp"
#include "agent/replay/truth.hpp"
#include "policy/config.hpp"
#include "policy/error.hpp"

namespace kvtier::agent {

// Bytes per tier, of the target memory the recording located.
struct TierBytes {
  std::uint64_t dram = 0;  // nodes with CPUs
  std::uint64_t slow = 0;  // memory-only nodes (CXL)
};

struct ReplayStep {
  TimeNs now = 0;  // CLOCK_MONOTONIC of the recorded step
  StepKind kind = StepKind::kStep;
  // The replay's.
  std::uint64_t demoted_bytes = 0;
  std::uint64_t promoted_bytes = 0;
  TierBytes placed;
  // The recorded run's, as recorded (the mover's report, the residency answers).
  std::uint64_t rec_demoted_bytes = 0;
  std::uint64_t rec_promoted_bytes = 0;
  TierBytes rec_placed;
  // The recorded samples of the step (PMU, faults: page-level evidence,
  // weighted) that fell on DRAM and on the slow tier, as the replay had placed
  // the pages when they were taken, and as the recording had.
  double sampled_dram = 0;
  double sampled_slow = 0;
  double rec_sampled_dram = 0;
  double rec_sampled_slow = 0;
  bool plan_as_recorded = true;  // the plan and every move equal the recording's
  // Against the ground truth (truth.hpp), when there is one: the reads since the
  // previous step, precision and recall at this step, this step's demotions.
  TruthScore truth;
  TruthScore rec_truth;
};

struct ReplayRun {
  std::vector<ReplayStep> steps;
  std::uint64_t demoted_bytes = 0;
  std::uint64_t promoted_bytes = 0;
  std::uint64_t rec_demoted_bytes = 0;
  std::uint64_t rec_promoted_bytes = 0;
  std::size_t steps_as_recorded = 0;
  double sampled_dram = 0;
  double sampled_slow = 0;
  double rec_sampled_dram = 0;
  double rec_sampled_slow = 0;
  // Every plan the replay made, encoded (recording.hpp), in order: equal bytes, equal plans.
  std::vector<std::uint8_t> plan_bytes;
  std::string note;  // what the recording lacked (a cut-short record)
  bool has_truth = false;
  TimeNs truth_cold_age = 0;
  TruthScore truth;
  TruthScore rec_truth;
};

// Ground truth to score against: kvsim's accesses records, and the age that
// makes a page "truly cold" (the same for every run compared).
struct TruthInput {
  std::vector<RecAccesses> windows;
  TimeNs cold_age = 0;
};

Result<ReplayRun> replay(const Recording& recording, const policy::CompiledConfig& config,
                         const TruthInput& truth = {});

// The cold_age of the group `config` puts the truth's process in (the recorded
// target with its pid); 10 s when no group selects it or the group has none.
TimeNs truth_cold_age(const Recording& recording, const std::vector<RecAccesses>& windows,
                      const policy::CompiledConfig& config);

}  // namespace kvtier::agent
