#include "agent/sources/bpf_events.hpp"

#include <fmt/format.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string_view>

#include "bpf/kvtier_abi.h"
#include "policy/error.hpp"
#include "policy/types.hpp"

namespace kvtier::agent {

std::string_view to_string(ProcEventKind k) {
  switch (k) {
    case ProcEventKind::kExec:
      return "exec";
    case ProcEventKind::kFork:
      return "fork";
    case ProcEventKind::kExit:
      return "exit";
  }
  return "?";
}

Result<ProcEvent> decode_proc_event(std::span<const std::byte> data) {
  kvt_proc_event e{};
  if (data.size() < sizeof(e)) {
    return fail(
        fmt::format("process event: {} bytes, expected {} (agent and BPF object from "
                    "different builds?)",
                    data.size(), sizeof(e)));
  }
  std::memcpy(&e, data.data(), sizeof(e));
  ProcEvent out{.pid = static_cast<Pid>(e.pid),
                .ppid = static_cast<Pid>(e.ppid),
                .time = e.time_ns,
                .exit_code = e.exit_code};
  switch (e.kind) {
    case KVT_PROC_EXEC:
      out.kind = ProcEventKind::kExec;
      break;
    case KVT_PROC_FORK:
      out.kind = ProcEventKind::kFork;
      break;
    case KVT_PROC_EXIT:
      out.kind = ProcEventKind::kExit;
      break;
    default:
      return fail(fmt::format("process event: unknown kind {}", e.kind));
  }
  out.comm.assign(e.comm, strnlen(e.comm, sizeof(e.comm)));
  return out;
}

Result<DamonRegionEvent> decode_damon_region(std::span<const std::byte> data,
                                             std::uint32_t max_nr_accesses) {
  kvt_damon_region e{};
  if (data.size() < sizeof(e)) {
    return fail(fmt::format("DAMON region event: {} bytes, expected {}", data.size(), sizeof(e)));
  }
  std::memcpy(&e, data.data(), sizeof(e));
  if (e.end <= e.start) {
    return fail(fmt::format("DAMON region event: empty range [{:#x}, {:#x})", e.start, e.end));
  }
  return DamonRegionEvent{
      .target_index = e.target_id,
      .nr_regions = e.nr_regions,
      .kdamond_pid = static_cast<Pid>(e.kdamond_pid),
      .access = RegionAccess{.range = AddrRange{.start = e.start, .end = e.end},
                             .nr_accesses = e.nr_accesses,
                             .max_nr_accesses = max_nr_accesses == 0 ? 1 : max_nr_accesses,
                             .age = e.age,
                             .time = e.time_ns,
                             .source = SourceKind::kDamon}};
}

}  // namespace kvtier::agent
