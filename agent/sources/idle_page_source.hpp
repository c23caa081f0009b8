#pragma once
// Idle-page tracking as a hotness source (no BPF): each collect() reads the
// targets' page tables through /proc/PID/pagemap, checks in
// /sys/kernel/mm/page_idle/bitmap which of the pages marked idle by the
// previous scan were accessed since, reports those, and marks every present
// page idle again. Needs CONFIG_IDLE_PAGE_TRACKING and CAP_SYS_ADMIN (PFNs).
// Costs a page-table walk per scan, so scans are `scan_interval` apart (the
// config's sources.idle_scan_interval): a collect() sooner reports nothing.

#include <cstdint>
#include <map>
#include <optional>
#include <unordered_map>
#include <vector>

#include "agent/host/host_paths.hpp"
#include "agent/sources/hotness_source.hpp"

namespace kvtier::agent {

struct IdlePageOptions {
  // Stop a scan after this many pages (all targets together).
  std::uint64_t max_pages_per_scan = 1ULL << 22;
  // At most one scan per this much time; 0: one per collect().
  TimeNs scan_interval = 10'000'000'000;
};

class IdlePageSource final : public HotnessSource {
 public:
  IdlePageSource(HostPaths paths, IdlePageOptions opts);

  [[nodiscard]] SourceKind kind() const override { return SourceKind::kIdlePage; }
  [[nodiscard]] Availability probe() const override;
  Result<void> start() override;
  Result<void> set_targets(std::span<const Pid> pids) override;
  Result<void> collect(TimeNs now, SourceBatch& out) override;
  void stop() override;

 private:
  Result<void> scan(Pid pid, TimeNs now, SourceBatch& out, std::uint64_t& budget);

  HostPaths paths_;
  IdlePageOptions opts_;
  bool started_ = false;
  std::optional<TimeNs> last_scan_;
  std::vector<Pid> targets_;
  // Per target: virtual page -> PFN marked idle by the previous scan.
  std::unordered_map<Pid, std::map<std::uint64_t, std::uint64_t>> marked_;
};

}  // namespace kvtier::agent
