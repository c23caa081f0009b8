#pragma once
// DAMON as a hotness source: kvtier sets up a vaddr kdamond over sysfs, one
// target per process, and reads each region's access count and age at every
// aggregation through damon:damon_aggregated (bpf/damon.bpf.c, a ring
// buffer), so nothing polls sysfs. Region granularity, but it reports cold
// regions too, which fault and PMU sampling cannot.

#include <cstdint>
#include <memory>
#include <vector>

#include "agent/host/damon_sysfs.hpp"
#include "agent/host/host_paths.hpp"
#include "agent/sources/hotness_source.hpp"

namespace kvtier::agent {

struct DamonOptions {
  DamonIntervals intervals;
  DamonRegionBounds nr_regions;
  std::uint32_t ring_bytes = 1U << 20;
};

class DamonSource final : public HotnessSource {
 public:
  DamonSource(HostPaths paths, DamonOptions opts);
  ~DamonSource() override;

  [[nodiscard]] SourceKind kind() const override { return SourceKind::kDamon; }
  [[nodiscard]] Availability probe() const override;
  Result<void> start() override;
  // Restarts the kdamond with the new targets (DAMON's per-region history
  // starts over); an empty set turns it off.
  Result<void> set_targets(std::span<const Pid> pids) override;
  Result<void> collect(TimeNs now, SourceBatch& out) override;
  void stop() override;

  // Regions lost because the ring buffer was full, and forwarded in total.
  [[nodiscard]] Result<std::pair<std::uint64_t, std::uint64_t>> forwarded_dropped() const;
  [[nodiscard]] std::vector<int> program_fds() const;
  [[nodiscard]] int kdamond_index() const { return kdamond_; }
  // The kdamond thread while it runs (0 otherwise): its CPU time is DAMON's cost.
  [[nodiscard]] Pid kdamond_pid() const { return kdamond_pid_; }

  struct Bpf;  // the loaded program and its ring buffer (opaque)

 private:
  Result<void> restart_kdamond();
  void turn_off();

  HostPaths paths_;
  DamonOptions opts_;
  DamonSysfs sysfs_;
  std::unique_ptr<Bpf> bpf_;
  std::vector<Pid> targets_;
  int kdamond_ = -1;
  Pid kdamond_pid_ = 0;
};

}  // namespace kvtier::agent
