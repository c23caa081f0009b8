#pragma once
// Which Linux capabilities each kvtier feature needs, and a start-up check
// that names every missing one in one line. The table is the reference for
// the unit's CapabilityBoundingSet= and for docs/capabilities.md.

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "policy/error.hpp"
#include "policy/types.hpp"

namespace kvtier::agent {

// Capability numbers from linux/capability.h, named here so callers need no
// kernel headers.
enum class Cap : std::uint8_t {
  kDacOverride = 1,
  kDacReadSearch = 2,
  kSysPtrace = 19,
  kSysAdmin = 21,
  kSysNice = 23,
  kSysResource = 24,
  kPerfmon = 38,
  kBpf = 39,
};

std::string_view cap_name(Cap cap);

enum class Feature : std::uint8_t {
  kBpfSources,    // BPF PMU and fault samplers
  kMovePages,     // move_pages(2) on the target processes
  kTargetProcfs,  // /proc/PID/maps, exe, cmdline of targets run by others
  kDamon,         // DAMON sysfs monitoring and DAMOS schemes
  kIdlePage,      // page_idle bitmap + /proc/PID/pagemap PFNs
  kSoftDirty,     // /proc/PID/pagemap soft-dirty bits + /proc/PID/clear_refs
  kBpfStats,      // BPF_ENABLE_STATS run-time accounting of kvtier's programs
};

// What running a hotness source of this kind needs.
Feature feature_for(SourceKind kind);

struct CapNeed {
  Cap cap;
  std::string_view why;  // what fails without it, in a few words
};

std::vector<CapNeed> capabilities_for(Feature feature);
// The union over `features`, each capability once (first reason kept).
std::vector<CapNeed> capabilities_for(std::span<const Feature> features);

// This process's effective capability set as a bit mask (bit N = capability N).
Result<std::uint64_t> effective_capabilities();

// Ok when every capability in `required` is effective. Otherwise one line:
// "missing capabilities: CAP_BPF (load the BPF samplers), CAP_PERFMON (...);
// run kvtierd as root or grant them (see kvtierd(8))".
Result<void> check_capabilities(std::span<const CapNeed> required);
// The same check against a given mask (tests, and a report of what is missing).
Result<void> check_capabilities(std::span<const CapNeed> required, std::uint64_t effective);

}  // namespace kvtier::agent
