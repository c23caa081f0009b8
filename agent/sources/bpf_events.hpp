#pragma once
// Decoding of the records the BPF programs put in ring buffers (layouts in
// bpf/kvtier_abi.h). Sizes are checked: a short or unknown record is an error,
// never a crash.

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "policy/error.hpp"
#include "policy/types.hpp"

namespace kvtier::agent {

enum class ProcEventKind : std::uint8_t { kExec, kFork, kExit };

std::string_view to_string(ProcEventKind k);

struct ProcEvent {
  ProcEventKind kind = ProcEventKind::kExec;
  Pid pid = 0;
  Pid ppid = 0;
  TimeNs time = 0;
  std::uint32_t exit_code = 0;  // as the kernel recorded it at exit (status << 8 | signal)
  std::string comm;
};

Result<ProcEvent> decode_proc_event(std::span<const std::byte> data);

struct DamonRegionEvent {
  std::uint32_t target_index = 0;  // targets/<index> of the context
  std::uint32_t nr_regions = 0;
  Pid kdamond_pid = 0;
  RegionAccess access;  // pid left 0: the caller maps target_index to a pid
};

// `max_nr_accesses` is aggr_us / sample_us of the context that produced it.
Result<DamonRegionEvent> decode_damon_region(std::span<const std::byte> data,
                                             std::uint32_t max_nr_accesses);

}  // namespace kvtier::agent
