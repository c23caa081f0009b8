#pragma once
// DAMON as a hotness source: kvtier sets up an fvaddr kdamond over sysfs (fixed
// virtual address ranges: the mappings the loop tracks, not the whole address
// space), one target per process, and reads each region's access count and age
// at every aggregation through damon:damon_aggregated (bpf/damon.bpf.c, a ring
// buffer), so nothing polls sysfs. Region granularity, but it reports cold
// regions too, which fault and PMU sampling cannot.
//
// Sizing ("auto" in the config): a region check (one page's accessed bit per
// region per sampling interval) costs kdamond a page-table walk, so the region
// count is bounded by kDamonChecksPerSec at the sampling interval (the
// intervals follow the cold age: policy::damon_intervals()).
//
// Ranges that change under the same processes are committed to the running
// kdamond from a thread of the source's own (LatestJobThread): the kernel's
// sysfs "commit" returns only once the kdamond applied it, at its next
// aggregation on 6.12 (cold_age / 2 with auto intervals, many seconds), and
// the control loop, the promotion tick and the control socket share one thread.

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "agent/host/damon_sysfs.hpp"
#include "agent/host/host_paths.hpp"
#include "agent/sources/hotness_source.hpp"
#include "agent/sources/latest_job_thread.hpp"

namespace kvtier::agent {

// kdamond's budget: region checks per second with auto-sized regions.
inline constexpr std::uint64_t kDamonChecksPerSec = 1000;

struct DamonOptions {
  std::uint64_t sample_us = 1'000'000;  // policy::damon_intervals()
  std::uint64_t aggr_us = 5'000'000;
  // nullopt: auto (damon_sizing()).
  std::optional<std::uint64_t> min_regions;
  std::optional<std::uint64_t> max_regions;
  std::uint32_t ring_bytes = 4U << 20;
};

struct DamonSizing {
  DamonIntervals intervals;
  DamonRegionBounds nr_regions;
};

// The intervals and region bounds for `tracked_bytes` of memory: the options'
// values where they are set, auto-sized where not.
DamonSizing damon_sizing(const DamonOptions& opts, std::uint64_t tracked_bytes);

// Initial regions: each range cut into equal pieces (whole pages, rounded up),
// about `count` over all of them, so DAMON starts at its minimum region count.
// One range gives at most `count` (the minimum may equal DAMON's maximum); each
// further range may add one, for its shorter last piece.
std::vector<AddrRange> split_evenly(std::span<const AddrRange> ranges, std::uint64_t count);

class DamonSource final : public HotnessSource {
 public:
  DamonSource(HostPaths paths, DamonOptions opts);
  ~DamonSource() override;

  [[nodiscard]] SourceKind kind() const override { return SourceKind::kDamon; }
  [[nodiscard]] Availability probe() const override;
  Result<void> start() override;
  // Restarts the kdamond with the new targets and their ranges (DAMON's
  // per-region history starts over); no target with a range turns it off.
  Result<void> set_targets(std::span<const Pid> pids) override;
  // New ranges of the same processes are committed to the running kdamond in
  // the background (it keeps the regions it refined inside them): this returns
  // without waiting for the kdamond, and only the newest ranges are committed
  // when several come while a commit is under way. A commit that failed
  // restarts the kdamond at the next call.
  Result<void> set_ranges(std::span<const TargetRanges> targets) override;
  // Waits for the background commit, if any (tests; stop() has its own way).
  void wait_commits() { committer_.wait_idle(); }
  // The last commit's failure, until set_ranges() acts on it (empty: none).
  [[nodiscard]] std::string commit_error() const {
    const std::scoped_lock lock(commit_error_mu_);
    return commit_error_;
  }
  // Commits sent to the kdamond, and range updates that a newer one replaced
  // before they were committed.
  [[nodiscard]] std::uint64_t commits() const { return committer_.ran(); }
  [[nodiscard]] std::uint64_t commits_replaced() const { return committer_.replaced(); }
  // What the running kdamond was given (for status and tests).
  [[nodiscard]] const DamonSizing& sizing() const { return sizing_; }
  Result<void> collect(TimeNs now, SourceBatch& out) override;
  void stop() override;

  // Regions lost because the ring buffer was full, and forwarded in total.
  [[nodiscard]] Result<std::pair<std::uint64_t, std::uint64_t>> forwarded_dropped() const;
  [[nodiscard]] std::vector<int> program_fds() const;
  // Where kvtierd keeps which kdamond is its own while it runs (DamonSysfs::write_owner,
  // removed when it is turned off); unset: nowhere. kvtierd reads it at start-up
  // (DamonSysfs::reclaim_leftover) to turn off a kdamond a killed kvtierd left on.
  void set_owner_file(std::filesystem::path file) { owner_file_ = std::move(file); }
  [[nodiscard]] int kdamond_index() const { return kdamond_; }
  // The kdamond thread while it runs (0 otherwise): its CPU time is DAMON's cost.
  [[nodiscard]] Pid kdamond_pid() const { return kdamond_pid_; }

  struct Bpf;  // the loaded program and its ring buffer (opaque)

 private:
  Result<void> restart_kdamond();
  void commit_ranges();
  void turn_off();

  HostPaths paths_;
  DamonOptions opts_;
  DamonSysfs sysfs_;
  std::unique_ptr<Bpf> bpf_;
  std::vector<Pid> pids_;
  std::vector<TargetRanges> ranges_;  // of the pids in pids_, sorted by pid
  // The kdamond's targets, in its target order (the BPF records' target index).
  std::vector<Pid> targets_;
  DamonSizing sizing_;
  int kdamond_ = -1;
  std::filesystem::path owner_file_;
  Pid kdamond_pid_ = 0;
  // Bumped by every turn_off(): a commit meant for an earlier kdamond does nothing.
  std::atomic<std::uint64_t> generation_{0};
  // The commit thread's last failure (empty: none); the loop thread takes it.
  mutable std::mutex commit_error_mu_;
  std::string commit_error_;
  // Last: destroyed (joined) first, before anything its jobs use.
  LatestJobThread committer_{"kvtier-damon"};
};

}  // namespace kvtier::agent
