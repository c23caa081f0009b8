#pragma once
// The agent's side of the per-page heat maps every page sampler has (see
// bpf/page_heat.bpf.h): the target set it fills, the (tgid, page) counts it
// drains, the per-CPU counters it sums.

#include <cstdint>
#include <span>
#include <vector>

#include "agent/sources/hotness_source.hpp"
#include "policy/error.hpp"
#include "policy/types.hpp"

struct kvt_page_key;
struct kvt_page_val;

namespace kvtier::agent {

struct SamplerStats {
  std::uint64_t events = 0;       // program runs, in any process
  std::uint64_t matched = 0;      // runs in a target process
  std::uint64_t no_addr = 0;      // target samples without a usable data address
  std::uint64_t map_full = 0;     // samples lost because the page map was full
  std::uint64_t prot_faults = 0;  // faults on present pages (write protection)
  std::uint64_t returns = 0;      // faults in a chunk the return watch had armed
  std::uint64_t return_lost = 0;  // of those, reports lost (the ring buffer was full)
};

class PageHeatMaps {
 public:
  PageHeatMaps() = default;
  PageHeatMaps(int targets_fd, int pages_fd, int stats_fd, SourceKind kind)
      : targets_fd_(targets_fd), pages_fd_(pages_fd), stats_fd_(stats_fd), kind_(kind) {}

  // Makes the in-kernel target set equal to `pids`; pages of processes that
  // leave the set are deleted.
  Result<void> set_targets(std::span<const Pid> pids);
  // Deletes every page entry of one process; returns how many.
  Result<std::size_t> purge(Pid pid) const;
  // Moves every page entry into `out` (one AccessSample per page: the weight
  // is what the samples stand for, the time the latest sample) and clears the
  // map, so each call reports what happened since the previous one.
  Result<std::size_t> drain(SourceBatch& out);
  [[nodiscard]] Result<SamplerStats> stats() const;
  [[nodiscard]] const std::vector<Pid>& targets() const { return targets_; }

 private:
  int targets_fd_ = -1;
  int pages_fd_ = -1;
  int stats_fd_ = -1;
  SourceKind kind_ = SourceKind::kPmu;
  std::vector<Pid> targets_;
};

// Sums a per-CPU array of u64 counters into one value per index.
Result<std::vector<std::uint64_t>> sum_percpu_u64(int map_fd, std::uint32_t entries);

}  // namespace kvtier::agent
