#pragma once
// The interface every hotness mechanism implements (BPF PMU sampler, fault
// sampler, DAMON reader, idle-page scanner), each known by its SourceKind.
// The registry (source_registry.hpp) probes them and picks what runs; the
// control loop starts those, tells them its targets and feeds what collect()
// returns into the heat model.

#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "agent/host/availability.hpp"
#include "policy/config.hpp"
#include "policy/error.hpp"
#include "policy/types.hpp"

namespace kvtier::agent {

class ReturnWatch;

struct TargetRanges {
  Pid pid = 0;
  std::vector<AddrRange> ranges;  // sorted, disjoint
  friend bool operator==(const TargetRanges&, const TargetRanges&) = default;
};

struct SourceBatch {
  std::vector<AccessSample> samples;
  std::vector<RegionAccess> regions;
};

class HotnessSource {
 public:
  virtual ~HotnessSource() = default;
  HotnessSource() = default;
  HotnessSource(const HotnessSource&) = delete;
  HotnessSource& operator=(const HotnessSource&) = delete;

  [[nodiscard]] virtual SourceKind kind() const = 0;
  // The name the config and the logs use ("pmu", "damon", ...).
  [[nodiscard]] std::string_view name() const { return policy::source_name(kind()); }
  [[nodiscard]] virtual Availability probe() const = 0;
  // Loads and attaches whatever the mechanism needs. Idempotent.
  virtual Result<void> start() = 0;
  // Replaces the set of processes to watch.
  virtual Result<void> set_targets(std::span<const Pid> pids) = 0;
  // The memory of each target worth watching (the mappings the loop tracks), after
  // every step's discovery; sources that watch whole processes ignore it.
  virtual Result<void> set_ranges(std::span<const TargetRanges> /*targets*/) { return {}; }
  // The return watch (return_watch.hpp), where this source has one and it runs.
  [[nodiscard]] virtual ReturnWatch* return_watch() { return nullptr; }
  // Appends what was observed since the last call; `now` is CLOCK_MONOTONIC.
  virtual Result<void> collect(TimeNs now, SourceBatch& out) = 0;
  // Detaches and releases everything start() created. Idempotent.
  virtual void stop() = 0;
};

}  // namespace kvtier::agent
