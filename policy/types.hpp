#pragma once
// The vocabulary shared by sources, policy and movers: plain data, no behaviour.
// Sources produce AccessSample / RegionAccess; the planner turns heat into a Plan
// of PlannedMove; movers execute it and report MoveStats.

#include <cstdint>
#include <string>
#include <vector>

namespace kvtier {

using Pid = std::int32_t;
// CLOCK_MONOTONIC nanoseconds, the clock bpf_ktime_get_ns() reads.
using TimeNs = std::uint64_t;

inline constexpr std::uint64_t kPageSize = 4096;
inline constexpr std::uint64_t kHugePageSize = 2ULL << 20;

// A half-open virtual address range [start, end) of one process.
struct AddrRange {
  std::uint64_t start = 0;
  std::uint64_t end = 0;

  [[nodiscard]] std::uint64_t bytes() const { return end - start; }
  [[nodiscard]] bool contains(std::uint64_t addr) const { return addr >= start && addr < end; }
  friend bool operator==(const AddrRange&, const AddrRange&) = default;
};

// Where a sample or a heat report came from: one value per hotness source the
// config can name (policy::source_name() gives the name).
enum class SourceKind : std::uint8_t {
  kPmu,        // perf_event samples with a data address (PEBS load latency, IBS op)
  kPmuSoft,    // the same sampler on the software page-faults perf event
  kFault,      // user page faults, including NUMA hint faults
  kDamon,      // DAMON region access counts
  kIdlePage,   // page_idle bitmap scans
  kSoftDirty,  // soft-dirty bits of /proc/PID/pagemap: pages written since the last scan
};

// One observed access at a page, scaled by the sampling period: a sample taken
// every `weight` events stands for `weight` accesses.
struct AccessSample {
  Pid pid = 0;
  std::uint64_t addr = 0;
  TimeNs time = 0;        // the latest access the sample stands for
  TimeNs first_time = 0;  // the first one (0: the same as time)
  std::uint32_t weight = 1;
  SourceKind source = SourceKind::kPmu;
};

// A region report in DAMON's terms: during the aggregation interval ending at
// `time`, `nr_accesses` of `max_nr_accesses` sampling checks found the region
// accessed; `age` is how many aggregation intervals the count has stayed similar.
struct RegionAccess {
  Pid pid = 0;
  AddrRange range;
  std::uint32_t nr_accesses = 0;
  std::uint32_t max_nr_accesses = 1;
  std::uint32_t age = 0;
  TimeNs time = 0;
  SourceKind source = SourceKind::kDamon;
};

enum class MoveReason : std::uint8_t {
  kColdAge,       // not accessed for longer than the cold age
  kWatermark,     // DRAM use above the watermark: coldest first
  kHeadroom,      // a DRAM node below its headroom: coldest first
  kHotPromotion,  // accessed again on the slow node
  kManual,        // asked for by an operator or a test
};

struct PlannedMove {
  Pid pid = 0;
  AddrRange range;
  int from_node = -1;  // -1: unknown / mixed
  int to_node = 0;
  MoveReason reason = MoveReason::kColdAge;
  double heat = 0.0;  // the heat figure the decision was based on
  std::string why;    // one line for `kvtierctl explain`
};

struct Plan {
  std::vector<PlannedMove> moves;
  std::uint64_t demote_bytes = 0;
  std::uint64_t promote_bytes = 0;
  // What the planner could not do and why (a limit not met, budget exhausted), one line each.
  std::vector<std::string> notes;
  // Bytes accessed on a slow node that stay there for want of room in DRAM
  // (nothing left to demote within the rules), not for want of budget.
  std::uint64_t waiting_bytes = 0;
};

// What a mover did with the pages it was asked to move, per kernel status.
struct MoveStats {
  std::uint64_t requested = 0;      // pages asked for
  std::uint64_t moved = 0;          // now on the target node
  std::uint64_t already_there = 0;  // were on the target node already
  std::uint64_t busy = 0;           // -EBUSY / -EAGAIN: try later
  std::uint64_t pinned = 0;         // long-term pinned: never retried in a loop
  std::uint64_t not_present = 0;    // -ENOENT / -EFAULT: not mapped or zero page
  std::uint64_t gone = 0;           // -ESRCH: the process exited
  std::uint64_t no_memory = 0;      // -ENOMEM: target node full
  std::uint64_t permission = 0;     // -EPERM / -EACCES
  std::uint64_t other = 0;          // any other errno
  // Pages of a huge page the request covered only partly (move_located):
  // left alone, as moving the head would move the whole 2 MiB.
  std::uint64_t partial_huge = 0;
  std::uint64_t bytes_moved = 0;
  int last_errno = 0;
  std::uint64_t calls = 0;  // move_pages calls made (queries included)

  MoveStats& operator+=(const MoveStats& o);
};

inline MoveStats& MoveStats::operator+=(const MoveStats& o) {
  requested += o.requested;
  moved += o.moved;
  already_there += o.already_there;
  busy += o.busy;
  pinned += o.pinned;
  not_present += o.not_present;
  gone += o.gone;
  no_memory += o.no_memory;
  permission += o.permission;
  other += o.other;
  partial_huge += o.partial_huge;
  bytes_moved += o.bytes_moved;
  calls += o.calls;
  if (o.last_errno != 0) last_errno = o.last_errno;
  return *this;
}

}  // namespace kvtier
