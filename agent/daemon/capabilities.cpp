#include "agent/daemon/capabilities.hpp"

#include <fmt/format.h>
#include <linux/capability.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "policy/error.hpp"
#include "policy/types.hpp"

namespace kvtier::agent {

std::string_view cap_name(Cap cap) {
  switch (cap) {
    case Cap::kDacOverride:
      return "CAP_DAC_OVERRIDE";
    case Cap::kDacReadSearch:
      return "CAP_DAC_READ_SEARCH";
    case Cap::kSysPtrace:
      return "CAP_SYS_PTRACE";
    case Cap::kSysAdmin:
      return "CAP_SYS_ADMIN";
    case Cap::kSysNice:
      return "CAP_SYS_NICE";
    case Cap::kSysResource:
      return "CAP_SYS_RESOURCE";
    case Cap::kPerfmon:
      return "CAP_PERFMON";
    case Cap::kBpf:
      return "CAP_BPF";
  }
  return "CAP_?";
}

Feature feature_for(SourceKind kind) {
  switch (kind) {
    case SourceKind::kDamon:
      return Feature::kDamon;
    case SourceKind::kIdlePage:
      return Feature::kIdlePage;
    case SourceKind::kSoftDirty:
      return Feature::kSoftDirty;
    case SourceKind::kPmu:
    case SourceKind::kPmuSoft:
    case SourceKind::kFault:
      break;
  }
  return Feature::kBpfSources;
}

// The reasons are the kernel checks that fail without the capability.
std::vector<CapNeed> capabilities_for(Feature feature) {
  switch (feature) {
    case Feature::kBpfSources:
      return {{Cap::kBpf, "create BPF maps and load the samplers"},
              {Cap::kPerfmon, "load tracing/perf_event programs and open per-CPU perf events"}};
    case Feature::kMovePages:
      return {{Cap::kSysPtrace, "move_pages on processes of other users or with more capabilities"},
              {Cap::kSysNice, "move_pages MPOL_MF_MOVE_ALL on shared pages"}};
    case Feature::kTargetProcfs:
      return {{Cap::kSysPtrace, "read /proc/PID/exe of other users' or more privileged processes"}};
    case Feature::kDamon:
      // DAMON's sysfs files are root-owned 0600: uid 0 is enough, no capability.
      return {};
    case Feature::kIdlePage:
      return {{Cap::kSysAdmin, "read page frame numbers from /proc/PID/pagemap"},
              {Cap::kSysPtrace, "open /proc/PID/pagemap of other users' processes"},
              {Cap::kDacReadSearch, "open /proc/PID/pagemap (mode 0400) owned by another uid"}};
    case Feature::kSoftDirty:
      return {{Cap::kSysPtrace, "open /proc/PID/pagemap of other users' processes"},
              {Cap::kDacOverride, "write /proc/PID/clear_refs (mode 0200) owned by another uid"}};
    case Feature::kBpfStats:
      return {{Cap::kSysAdmin, "BPF_ENABLE_STATS"}};
  }
  return {};
}

std::vector<CapNeed> capabilities_for(std::span<const Feature> features) {
  std::vector<CapNeed> out;
  for (const Feature f : features) {
    for (const auto& need : capabilities_for(f)) {
      const bool seen =
          std::any_of(out.begin(), out.end(), [&](const CapNeed& n) { return n.cap == need.cap; });
      if (!seen) out.push_back(need);
    }
  }
  return out;
}

Result<std::uint64_t> effective_capabilities() {
  __user_cap_header_struct hdr{.version = _LINUX_CAPABILITY_VERSION_3, .pid = 0};
  std::array<__user_cap_data_struct, _LINUX_CAPABILITY_U32S_3> data{};
  if (syscall(SYS_capget, &hdr, data.data()) != 0) {
    const int err = errno;
    return fail(fmt::format("capget: {}", errno_text(err)), err);
  }
  return static_cast<std::uint64_t>(data[0].effective) |
         (static_cast<std::uint64_t>(data[1].effective) << 32);
}

Result<void> check_capabilities(std::span<const CapNeed> required, std::uint64_t effective) {
  std::string missing;
  for (const auto& need : required) {
    if ((effective >> static_cast<unsigned>(need.cap)) & 1U) continue;
    if (!missing.empty()) missing += ", ";
    missing += fmt::format("{} ({})", cap_name(need.cap), need.why);
  }
  if (missing.empty()) return {};
  return fail(fmt::format("missing capabilities: {}; run kvtierd as root or grant them "
                          "(see kvtierd(8), CAPABILITIES)",
                          missing),
              EPERM);
}

Result<void> check_capabilities(std::span<const CapNeed> required) {
  auto eff = effective_capabilities();
  if (!eff) return std::unexpected(eff.error());
  return check_capabilities(required, *eff);
}

}  // namespace kvtier::agent
