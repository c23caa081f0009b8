#pragma once
// Soft-dirty bits as a hotness source (no BPF): each scan reads the tracked
// mappings' entries in /proc/PID/pagemap, reports every present page whose
// soft-dirty bit is set (written since the previous scan), and clears the bits
// by writing "4" to /proc/PID/clear_refs. The first scan of a process only
// clears. Needs CONFIG_MEM_SOFT_DIRTY; no PFNs, so no CAP_SYS_ADMIN.
//
// It sees writes, page by page, whether or not the kernel's NUMA scan has
// unmapped the page: a KV block reused by a new sequence is written (prefill)
// before it is read every decode step, so a block demoted while it sat free is
// found at the next scan even when the owner uses too little CPU for the
// kernel to scan it (its NUMA scan period counts the owner's CPU time). It
// does not see reads. clear_refs resets the whole process (the kernel has no
// narrower interface), and the next write to each page takes a minor fault;
// it also resets what another soft-dirty user (CRIU) of the same process saw.

#include <cstdint>
#include <map>
#include <vector>

#include "agent/host/clock.hpp"
#include "agent/host/host_paths.hpp"
#include "agent/sources/hotness_source.hpp"

namespace kvtier::agent {

struct SoftDirtyOptions {
  // Stop a scan after this many pages (all targets together).
  std::uint64_t max_pages_per_scan = 1ULL << 24;
  // At most one scan per this much time; 0: one per collect().
  TimeNs scan_interval = 1'000'000'000;
  // A scan may cost at most this share of a CPU until the next one: a scan
  // that took 40 ms of CPU puts the next one 2 s later at 2%, whatever
  // scan_interval says (a process with a large address space costs more).
  double max_cpu_share = 0.02;
  // Where the cost is read: the scanning thread's CPU time, in which the
  // page-table walks of pagemap and clear_refs run (tests give their own).
  Clock cpu_clock = thread_cpu_now;
};

class SoftDirtySource final : public HotnessSource {
 public:
  SoftDirtySource(HostPaths paths, SoftDirtyOptions opts);

  [[nodiscard]] SourceKind kind() const override { return SourceKind::kSoftDirty; }
  [[nodiscard]] Availability probe() const override;
  Result<void> start() override;
  Result<void> set_targets(std::span<const Pid> pids) override;
  Result<void> set_ranges(std::span<const TargetRanges> targets) override;
  Result<void> collect(TimeNs now, SourceBatch& out) override;
  void stop() override;

 private:
  Result<void> scan(Pid pid, TimeNs now, SourceBatch& out, std::uint64_t& budget);

  HostPaths paths_;
  SoftDirtyOptions opts_;
  bool started_ = false;
  // When the next scan may run (the interval, or the last scan's cost, away).
  std::optional<TimeNs> next_scan_;
  std::vector<Pid> targets_;
  // The tracked mappings per target (set_ranges); a target without them is
  // scanned over its movable anonymous mappings.
  std::map<Pid, std::vector<AddrRange>> ranges_;
  // Per target: when its bits were last cleared (its writes since are news).
  std::map<Pid, TimeNs> cleared_;
};

}  // namespace kvtier::agent
