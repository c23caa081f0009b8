#include "agent/sources/damon_source.hpp"

#include <bpf/bpf.h>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "agent/host/availability.hpp"
#include "agent/host/damon_sysfs.hpp"
#include "agent/host/host_paths.hpp"
#include "agent/sources/bpf_events.hpp"
#include "agent/sources/bpf_skeleton.hpp"
#include "agent/sources/hotness_source.hpp"
#include "agent/sources/page_heat_maps.hpp"
#include "agent/sources/probes.hpp"
#include "damon.skel.h"
#include "policy/error.hpp"
#include "policy/types.hpp"
#include "policy/units.hpp"

namespace kvtier::agent {

struct RingBufferDeleter {
  void operator()(ring_buffer* rb) const { ring_buffer__free(rb); }
};

struct DamonSource::Bpf {
  BpfSkeleton<damon_bpf> skel{"DAMON reader (bpf/damon.bpf.c)"};
  std::unique_ptr<ring_buffer, RingBufferDeleter> ring;
  // Filled by the ring buffer callback during collect().
  SourceBatch* out = nullptr;
  const std::vector<Pid>* targets = nullptr;
  Pid kdamond_pid = 0;
  std::uint32_t max_nr_accesses = 1;
  std::uint64_t bad = 0;
};

DamonSource::DamonSource(HostPaths paths, DamonOptions opts)
    : paths_(std::move(paths)), opts_(opts), sysfs_(DamonSysfs::under(paths_)) {}

DamonSource::~DamonSource() {
  stop();
}

Availability DamonSource::probe() const {
  if (auto a = probe_btf(paths_); !a.ok) return a;
  if (auto a = probe_bpf_privileges(); !a.ok) return a;
  if (auto a = probe_bpf_kernel_reads(paths_, "the damon source"); !a.ok) return a;
  // fvaddr comes with vaddr (both are mm/damon/vaddr.c, CONFIG_DAMON_VADDR).
  if (auto a = probe_damon_vaddr(paths_); !a.ok) return a;
  if (auto a = probe_tracepoint(paths_, "damon", "damon_aggregated"); !a.ok) return a;
  auto n = sysfs_.nr_kdamonds();
  if (!n) return unavailable(n.error().message);
  bool free_one = *n == 0;
  for (int kd = 0; kd < *n && !free_one; ++kd) {
    auto s = sysfs_.state(kd);
    free_one = s && *s == "off";
  }
  if (!free_one) {
    return refused_by_kernel(
        fmt::format("DAMON busy: all {} kdamonds are on (another DAMON user)", *n));
  }
  return available("ok: DAMON vaddr regions via damon:damon_aggregated");
}

namespace {

int on_region(void* ctx, void* data, size_t size) {
  auto* b = static_cast<DamonSource::Bpf*>(ctx);
  auto ev = decode_damon_region(
      std::span<const std::byte>(static_cast<const std::byte*>(data), size), b->max_nr_accesses);
  // Records from a previous kdamond (before a restart) carry stale indexes.
  if (!ev || ev->kdamond_pid != b->kdamond_pid || ev->target_index >= b->targets->size()) {
    ++b->bad;
    return 0;
  }
  ev->access.pid = (*b->targets)[ev->target_index];
  b->out->regions.push_back(ev->access);
  return 0;
}

}  // namespace

Result<void> DamonSource::start() {
  if (bpf_) return {};
  auto b = std::make_unique<Bpf>();
  if (auto ok = b->skel.open(); !ok) return ok;
  bpf_map__set_max_entries(b->skel->maps.regions, opts_.ring_bytes);
  if (auto ok = b->skel.load(); !ok) return ok;
  if (auto ok = b->skel.attach(); !ok) return ok;
  b->ring.reset(ring_buffer__new(bpf_map__fd(b->skel->maps.regions), on_region, b.get(), nullptr));
  if (!b->ring) {
    const int err = errno;
    return fail(fmt::format("DAMON reader: ring_buffer__new: {}", errno_text(err)), err);
  }
  b->targets = &targets_;
  bpf_ = std::move(b);
  if (!ranges_.empty()) return restart_kdamond();
  return {};
}

void DamonSource::turn_off() {
  // A commit meant for this kdamond must not reach the next one.
  ++generation_;
  committer_.drop_waiting();
  if (kdamond_ < 0) return;
  auto s = sysfs_.state(kdamond_);
  if (s && *s == "on") {
    auto ok = sysfs_.turn_off(kdamond_);
    if (!ok && ok.error().code == EBUSY) {
      // The kernel's DAMON lock is held for the commit under way: off once it is applied.
      committer_.wait_idle();
      ok = sysfs_.turn_off(kdamond_);
    }
    if (!ok) spdlog::warn("damon: {}", ok.error().message);
  }
  // A commit under way ends when the kdamond stops (the kernel stops waiting
  // for it); the next configure() writes the files that commit wrote.
  committer_.wait_idle();
  {
    const std::scoped_lock lock(commit_error_mu_);
    commit_error_.clear();  // the failure of a commit to this kdamond, which is gone
  }
  if (!owner_file_.empty()) {
    std::error_code ec;
    std::filesystem::remove(owner_file_, ec);
  }
  if (bpf_ && kdamond_pid_ > 0) {
    const auto key = static_cast<__u32>(kdamond_pid_);
    bpf_map_delete_elem(bpf_map__fd(bpf_->skel->maps.kdamonds), &key);
  }
  kdamond_pid_ = 0;
}

DamonSizing damon_sizing(const DamonOptions& opts, std::uint64_t tracked_bytes) {
  DamonSizing s;
  s.intervals.sample_us = std::max<std::uint64_t>(opts.sample_us, 1);
  s.intervals.aggr_us = std::max(opts.aggr_us, s.intervals.sample_us);
  s.intervals.update_us = s.intervals.aggr_us;
  // About one region per 64 KiB tracked (a KV block or two), as many as
  // kdamond may check at its sampling interval, never fewer than 16.
  const std::uint64_t budget =
      kDamonChecksPerSec * std::max<std::uint64_t>(s.intervals.sample_us, 1) / 1'000'000;
  const std::uint64_t want = std::max<std::uint64_t>(tracked_bytes / (std::uint64_t{64} << 10), 16);
  s.nr_regions.max = opts.max_regions.value_or(
      std::clamp<std::uint64_t>(want, 16, std::max<std::uint64_t>(budget, 16)));
  s.nr_regions.min = opts.min_regions.value_or(std::max<std::uint64_t>(s.nr_regions.max / 4, 10));
  s.nr_regions.min = std::min(s.nr_regions.min, s.nr_regions.max);
  return s;
}

std::vector<AddrRange> split_evenly(std::span<const AddrRange> ranges, std::uint64_t count) {
  std::uint64_t total = 0;
  for (const auto& r : ranges) total += r.bytes();
  std::vector<AddrRange> out;
  if (total == 0) return out;
  // Rounded up to whole pages: one range never gives more pieces than `count`.
  const std::uint64_t pages = total / kPageSize;
  const std::uint64_t n = std::max<std::uint64_t>(count, 1);
  const std::uint64_t piece = std::max<std::uint64_t>((pages + n - 1) / n, 1) * kPageSize;
  for (const auto& r : ranges) {
    for (std::uint64_t a = r.start; a < r.end; a += piece) {
      out.push_back({a, std::min(r.end, a + piece)});
    }
  }
  return out;
}

Result<void> DamonSource::restart_kdamond() {
  turn_off();
  DamonContextSpec spec{.operations = "fvaddr"};
  std::uint64_t tracked = 0;
  for (const auto& t : ranges_) {
    for (const auto& r : t.ranges) tracked += r.bytes();
  }
  sizing_ = damon_sizing(opts_, tracked);
  spec.intervals = sizing_.intervals;
  spec.nr_regions = sizing_.nr_regions;
  targets_.clear();
  for (const auto& t : ranges_) {
    if (t.ranges.empty()) continue;
    std::uint64_t bytes = 0;
    for (const auto& r : t.ranges) bytes += r.bytes();
    // This target's share of the minimum region count, as its initial regions.
    const std::uint64_t share = std::max<std::uint64_t>(
        sizing_.nr_regions.min * bytes / std::max<std::uint64_t>(tracked, 1), 1);
    spec.targets.push_back(DamonTargetSpec{.pid = t.pid, .regions = split_evenly(t.ranges, share)});
    targets_.push_back(t.pid);
  }
  if (targets_.empty()) return {};
  if (kdamond_ < 0) {
    auto kd = sysfs_.claim_kdamond();
    if (!kd) return std::unexpected(kd.error());
    kdamond_ = *kd;
  }
  if (auto ok = sysfs_.configure(kdamond_, spec); !ok) return ok;
  if (auto ok = sysfs_.turn_on(kdamond_); !ok) return ok;
  auto pid = sysfs_.kdamond_pid(kdamond_);
  if (!pid) return std::unexpected(pid.error());
  kdamond_pid_ = *pid;
  if (!owner_file_.empty()) {
    if (auto ok = sysfs_.write_owner(owner_file_, kdamond_, *pid); !ok) {
      spdlog::warn("damon: {} (a kvtierd killed now leaves kdamond {} on)", ok.error().message,
                   kdamond_);
    }
  }
  bpf_->kdamond_pid = *pid;
  bpf_->max_nr_accesses = static_cast<std::uint32_t>(std::max<std::uint64_t>(
      1, sizing_.intervals.aggr_us / std::max<std::uint64_t>(1, sizing_.intervals.sample_us)));
  const auto key = static_cast<__u32>(*pid);
  const __u8 one = 1;
  if (bpf_map_update_elem(bpf_map__fd(bpf_->skel->maps.kdamonds), &key, &one, BPF_ANY) != 0) {
    const int err = errno;
    return fail(fmt::format("DAMON reader: kdamond map: {}", errno_text(err)), err);
  }
  spdlog::info(
      "damon: kdamond {} (pid {}) watches {} of {} processes: sampling every {}, aggregating "
      "every {}, {}-{} regions",
      kdamond_, *pid, policy::format_size(tracked), targets_.size(),
      policy::format_duration(sizing_.intervals.sample_us * 1000),
      policy::format_duration(sizing_.intervals.aggr_us * 1000), sizing_.nr_regions.min,
      sizing_.nr_regions.max);
  return {};
}

Result<void> DamonSource::set_targets(std::span<const Pid> pids) {
  std::vector<Pid> wanted(pids.begin(), pids.end());
  std::ranges::sort(wanted);
  wanted.erase(std::ranges::unique(wanted).begin(), wanted.end());
  if (wanted == pids_) return {};
  pids_ = std::move(wanted);
  const auto before = ranges_.size();
  std::erase_if(ranges_,
                [&](const TargetRanges& t) { return !std::ranges::binary_search(pids_, t.pid); });
  if (!bpf_ || ranges_.size() == before) return {};
  return restart_kdamond();
}

Result<void> DamonSource::set_ranges(std::span<const TargetRanges> targets) {
  std::vector<TargetRanges> wanted;
  for (const auto& t : targets) {
    if (std::ranges::binary_search(pids_, t.pid) && !t.ranges.empty()) wanted.push_back(t);
  }
  std::ranges::sort(wanted, {}, &TargetRanges::pid);
  std::string failed;
  {
    const std::scoped_lock lock(commit_error_mu_);
    failed = std::exchange(commit_error_, {});
  }
  if (!failed.empty()) {
    spdlog::warn("damon: commit of new ranges failed ({}): restarting the kdamond", failed);
  }
  if (wanted == ranges_ && failed.empty()) return {};
  const bool same_targets = failed.empty() && kdamond_pid_ > 0 &&
                            std::ranges::equal(wanted, targets_, {}, &TargetRanges::pid);
  ranges_ = std::move(wanted);
  if (!bpf_) return {};
  // The same processes with mappings that grew or shrank (a heap, an arena):
  // commit the new ranges to the running kdamond, which keeps the regions it
  // refined inside them; a restart would forget every region's history.
  if (same_targets) {
    commit_ranges();
    return {};
  }
  return restart_kdamond();
}

// On the commit thread: "commit" returns once the kdamond applied the ranges
// (6.12: at its next aggregation). Only this kdamond's generation writes.
void DamonSource::commit_ranges() {
  committer_.post([this, kd = kdamond_, gen = generation_.load(), ranges = ranges_] {
    const auto failed = [&](const std::string& why) {
      const std::scoped_lock lock(commit_error_mu_);
      if (gen == generation_) commit_error_ = why;
    };
    if (gen != generation_) return;
    for (std::size_t i = 0; i < ranges.size(); ++i) {
      if (auto ok = sysfs_.set_regions(kd, i, ranges[i].ranges); !ok) {
        failed(ok.error().message);
        return;
      }
    }
    const auto t0 = std::chrono::steady_clock::now();
    if (auto ok = sysfs_.send(kd, "commit"); !ok) {
      failed(ok.error().message);
      return;
    }
    spdlog::debug(
        "damon: kdamond {} applied the new ranges after {} ms", kd,
        std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0)
            .count());
  });
}

Result<void> DamonSource::collect(TimeNs /*now*/, SourceBatch& out) {
  if (!bpf_) return fail("damon: collect() before start()");
  bpf_->out = &out;
  const int rc = ring_buffer__consume(bpf_->ring.get());
  bpf_->out = nullptr;
  if (rc < 0) return fail(fmt::format("damon: ring buffer: {}", errno_text(-rc)), -rc);
  return {};
}

Result<std::pair<std::uint64_t, std::uint64_t>> DamonSource::forwarded_dropped() const {
  if (!bpf_) return fail("damon: not started");
  auto s = sum_percpu_u64(bpf_map__fd(bpf_->skel->maps.damon_stats), 2);
  if (!s) return std::unexpected(s.error());
  return std::pair{(*s)[0], (*s)[1]};
}

std::vector<int> DamonSource::program_fds() const {
  if (!bpf_) return {};
  return {bpf_program__fd(bpf_->skel->progs.kvt_damon_aggregated)};
}

void DamonSource::stop() {
  turn_off();
  bpf_.reset();
}

}  // namespace kvtier::agent
