#pragma once
// The control loop's knowledge of its targets' long-term pinned memory
// (policy/pinned.hpp), from the kernel (VmPin, io_uring's registered buffers:
// agent/host/pinned_memory.hpp) and from the mover's refusals. The planner
// leaves these ranges out; the views, status and kvtier_pinned_bytes show them.

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "agent/host/host_paths.hpp"
#include "agent/loop/target_set.hpp"
#include "agent/telemetry/telemetry.hpp"
#include "policy/config.hpp"
#include "policy/types.hpp"

namespace kvtier::agent {

// How often a target's pinned memory is read again while its mappings stay.
inline constexpr TimeNs kPinnedReadEvery = 10'000'000'000;

// After the mappings are tracked: each target whose mappings changed forgets
// its refusals and is read again at once; the others every kPinnedReadEvery.
// Refusals whose backoff ended cover nothing any more.
void refresh_pinned(TargetSet& targets, const HostPaths& paths, TimeNs now);
// The pages the mover found pinned (Mover::take_refused), into their targets.
void note_refused(TargetSet& targets, const std::vector<std::pair<Pid, AddrRange>>& refused,
                  TimeNs now);
// A target's pinned bytes per node, as its heat table places them (not
// resident: node -1).
std::map<int, std::uint64_t> pinned_bytes_per_node(const Target& t, TimeNs now);
// kvtier_pinned_bytes{group,node}, recomputed.
void export_pinned(const TargetSet& targets, std::span<const policy::GroupConfig> groups,
                   TimeNs now, Telemetry& telemetry);
// The pinned bytes that count for the status warning: the known ranges, or
// VmPin when the kernel charges more than they cover.
std::uint64_t pinned_bytes(const Target& t);

}  // namespace kvtier::agent
