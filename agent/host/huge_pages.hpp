#pragma once
// Which 2 MiB blocks of a process's memory a huge folio (THP or hugetlb)
// backs: the residency reader reports them so the heat table plans a huge
// page as one unit, and the mover passes such a block to move_pages by its
// head address only.

#include <cstdint>
#include <vector>

#include "agent/host/host_paths.hpp"
#include "policy/error.hpp"
#include "policy/types.hpp"

namespace kvtier::agent {

// Finds the 2 MiB blocks of a process's range that a huge folio backs.
class HugePageProbe {
 public:
  virtual ~HugePageProbe() = default;
  HugePageProbe() = default;
  HugePageProbe(const HugePageProbe&) = delete;
  HugePageProbe& operator=(const HugePageProbe&) = delete;
  // Sorted 2 MiB-aligned block starts intersecting `range`.
  virtual Result<std::vector<std::uint64_t>> huge_blocks(Pid pid, AddrRange range) = 0;
};

// /proc/PID/pagemap gives each block's first and last frame, /proc/kpageflags
// says whether the first is the head of a THP or hugetlb folio. Needs
// CAP_SYS_ADMIN (frame numbers read as 0 without it: no blocks are reported).
class KpageflagsHugeProbe final : public HugePageProbe {
 public:
  explicit KpageflagsHugeProbe(HostPaths host = {}) : host_(std::move(host)) {}
  Result<std::vector<std::uint64_t>> huge_blocks(Pid pid, AddrRange range) override;

 private:
  HostPaths host_;
};

}  // namespace kvtier::agent
