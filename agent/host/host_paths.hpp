#pragma once
// Every kernel path kvtier reads is built from these roots, so tests point the
// readers at fixture trees (tests/fixtures/) instead of the live /proc and /sys.

#include <filesystem>

namespace kvtier::agent {

struct HostPaths {
  std::filesystem::path proc = "/proc";
  std::filesystem::path sys = "/sys";

  // A tree laid out as ROOT/proc and ROOT/sys (how fixtures are stored).
  static HostPaths under(const std::filesystem::path& root) {
    return HostPaths{.proc = root / "proc", .sys = root / "sys"};
  }
};

}  // namespace kvtier::agent
