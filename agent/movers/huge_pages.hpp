#pragma once
// Transparent huge pages are moved whole: move_pages on the head address moves
// the 2 MiB folio at once, while passing its 512 small addresses isolates it at
// the first and reports the other 511 as busy. So ranges are cut into move
// units first: one unit per 2 MiB block backed by a huge folio, one per small
// page elsewhere.

#include <cstdint>
#include <span>
#include <vector>

#include "agent/host_paths.hpp"
#include "policy/error.hpp"
#include "policy/types.hpp"

namespace kvtier::agent {

// One address handed to move_pages, standing for `pages` small pages.
struct MoveUnit {
  std::uint64_t addr = 0;
  std::uint32_t pages = 1;
  friend bool operator==(const MoveUnit&, const MoveUnit&) = default;
};

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

// Page-aligns each range (start down, end up) and cuts it into units; a huge
// block that a range only partly covers still becomes one unit (the kernel
// would move the whole folio anyway) counting only the covered pages.
std::vector<MoveUnit> split_units(std::span<const AddrRange> ranges,
                                  std::span<const std::uint64_t> huge_blocks);

// Pages in the page-aligned ranges.
std::uint64_t count_pages(std::span<const AddrRange> ranges);

}  // namespace kvtier::agent
