#pragma once
// Which node each range of a process is on, for the planner's snapshot and for
// telemetry. The exact way is a move_pages status query (no pages move; the
// kernel walks the page tables); the cheap way is /proc/PID/numa_maps, which
// gives per-mapping page counts per node without walking anything we ask for.

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "agent/host/host_paths.hpp"
#include "agent/host/move_pages_call.hpp"
#include "policy/error.hpp"
#include "policy/types.hpp"

namespace kvtier::agent {

struct RangeResidency {
  AddrRange range;
  std::map<int, std::uint64_t> bytes_per_node;
  std::uint64_t not_present_bytes = 0;  // not mapped, never touched, or the zero page
  std::uint64_t other_bytes = 0;        // any other status

  [[nodiscard]] std::uint64_t bytes_on(int node) const {
    auto it = bytes_per_node.find(node);
    return it == bytes_per_node.end() ? 0 : it->second;
  }
};

class ResidencyReader {
 public:
  explicit ResidencyReader(MovePagesFn query = system_move_pages(), std::size_t batch_pages = 4096);

  // One entry per range, in order. A process that is gone is an error (ESRCH
  // or EINVAL in Error::code).
  Result<std::vector<RangeResidency>> read(Pid pid, std::span<const AddrRange> ranges);

 private:
  MovePagesFn query_;
  std::size_t batch_pages_;
  std::vector<void*> addrs_;
  std::vector<int> status_;
};

// One line of /proc/PID/numa_maps.
struct NumaMapsEntry {
  std::uint64_t start = 0;
  std::string policy;
  std::map<int, std::uint64_t> pages_per_node;  // N<node>=<pages>
  std::uint64_t page_size = kPageSize;          // kernelpagesize_kB
  bool anon = false;
  bool huge = false;  // a hugetlbfs mapping
  std::string file;

  [[nodiscard]] std::uint64_t bytes_on(int node) const;
};

// `what` names the source in error messages (the file path).
Result<std::vector<NumaMapsEntry>> parse_numa_maps(std::string_view text, std::string_view what);

// Bytes per node of the mappings that start inside one of `ranges` (numa_maps
// has no end addresses; all mappings if `ranges` is empty).
std::map<int, std::uint64_t> numa_maps_bytes(std::span<const NumaMapsEntry> entries,
                                             std::span<const AddrRange> ranges = {});

Result<std::vector<NumaMapsEntry>> read_numa_maps(const HostPaths& host, Pid pid);

}  // namespace kvtier::agent
