#pragma once
// Which node each page of a process is on: the one residency reader of the
// agent. The control loop's residency phase maps every tracked page with it
// (runs per node for the heat table, huge pages for HeatTable::set_huge,
// bytes per node for telemetry); the dry-run mover counts with it. The exact
// way is a move_pages status query (no pages move; the kernel walks the page
// tables); the cheap way is /proc/PID/numa_maps, which gives per-mapping page
// counts per node without walking anything we ask for.

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "agent/host/host_paths.hpp"
#include "agent/host/huge_pages.hpp"
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

// Every page of some ranges, as runs of neighbouring pages with one status.
struct PageMap {
  struct Run {
    AddrRange range;
    int node = -1;  // -1: not present, or any other non-node status
  };
  std::vector<Run> runs;                   // address order
  std::vector<std::uint64_t> huge_blocks;  // sorted 2 MiB blocks a huge folio backs
  std::map<int, std::uint64_t> bytes_per_node;
  std::uint64_t not_present_bytes = 0;  // any status other than a node
};

class ResidencyReader {
 public:
  // `huge`: finds the huge pages for map(); nullptr: none are reported.
  explicit ResidencyReader(MovePagesFn query = system_move_pages(), std::size_t batch_pages = 4096,
                           std::shared_ptr<HugePageProbe> huge = nullptr);

  // One entry per range, in order. A process that is gone is an error (ESRCH
  // or EINVAL in Error::code).
  Result<std::vector<RangeResidency>> read(Pid pid, std::span<const AddrRange> ranges);
  // The runs of every page of `ranges` (sorted, disjoint) and their huge pages.
  // When a query fails part way (the process exits), what was read so far is
  // returned with the error's message in `error` (and no huge pages).
  PageMap map(Pid pid, std::span<const AddrRange> ranges, std::string* error = nullptr);
  // map() without the huge pages: only where each page is. For many short
  // ranges (the pages sampled since the last read), which one query call
  // covers up to batch_pages of, whatever their number.
  PageMap nodes(Pid pid, std::span<const AddrRange> ranges, std::string* error = nullptr);
  // The 2 MiB blocks of `ranges` a huge folio backs, sorted (none without a probe).
  std::vector<std::uint64_t> huge_blocks(Pid pid, std::span<const AddrRange> ranges);

 private:
  // Calls visit(page address, status) for every page of `ranges`, in order, up to
  // batch_pages a query call across range boundaries; the failed query's error.
  template <class Visit>
  Result<void> query(Pid pid, std::span<const AddrRange> ranges, Visit&& visit);

  MovePagesFn query_;
  std::size_t batch_pages_;
  std::shared_ptr<HugePageProbe> huge_;
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
