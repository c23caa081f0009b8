#pragma once
// The residency phase after a target's first full read (issue 33): where its
// pages are, read at the cost of the evidence, not of the pool. A move_pages
// status query costs the kernel about 190 ns a page (50 s for 1 TiB), so after
// the first read of every page kvtierd keeps the nodes from what it learns
// anyway (the mover's results, the pages the sources sampled: the kernel's
// promotions in the fault path) and reads only:
//   - every 30 s (the check), from the heat table's runs: every unit whose node
//     is not known (not present at the last read: memory being filled) in full;
//     of the rest, one page per 2 MiB block, a different one at each check (a
//     block whose page is not where the table says is read whole), of at most
//     kCheckProbeBlocks blocks a check, the others at the next checks. The pages
//     with their own state (page-level evidence) are read in full instead when
//     the kernel may have moved some unseen: its reclaim demoted or its fault
//     path promoted pages since the target's last check (/proc/vmstat
//     pgdemote_*, pgpromote_success, host-wide), or that is not known;
//   - at once, what the table cannot know: new mappings, and the ranges a move
//     left partly behind (Target::reread).

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "agent/host/host_paths.hpp"
#include "agent/host/residency.hpp"
#include "agent/loop/target_set.hpp"
#include "policy/heat.hpp"
#include "policy/types.hpp"

namespace kvtier::agent {

// The pages a check asks about.
struct ResidencyProbes {
  struct Probe {
    std::uint64_t page = 0;
    AddrRange part;  // the run's part in the probe's 2 MiB block, read whole if it disagrees
    int node = -1;   // where the table has it
  };
  std::vector<AddrRange> exact;  // read in full: pages with their own state, unknown nodes
  std::vector<Probe> probes;     // one page per 2 MiB block of a run of alike pages
};

// Which 2 MiB blocks a check probes (issue 33: a bounded sample of the memory without
// evidence, not one page per block of the pool): block number b (address / 2 MiB) when
// (b + at) % every == 0. A target of more than kCheckProbeBlocks blocks is probed over
// `every` checks, each block once in them; a smaller one at every check (every = 1).
struct ProbeShare {
  std::uint64_t every = 1;
  std::uint64_t at = 0;
  [[nodiscard]] bool probed(std::uint64_t addr) const {
    return every <= 1 || (addr / kHugePageSize + at) % every == 0;
  }
};
// The most blocks a check probes (128 GiB of alike memory): a 1 TiB target's blocks are all
// probed over 8 checks (4 minutes at the 30 s check).
inline constexpr std::uint64_t kCheckProbeBlocks = 65536;
// The share of check number `check` of a target whose mappings span `bytes`.
ProbeShare probe_share(std::uint64_t bytes, std::uint64_t check);

// The probes of `heat` at check number `turn` (the page asked about in a block changes with it);
// `evidence_exact`: the pages with their own state go in `exact`, else they are probed too;
// only the blocks of `share` are probed (what is read in full is not sampled).
ResidencyProbes residency_probes(const policy::HeatTable& heat, TimeNs now, std::uint64_t turn,
                                 bool evidence_exact = true, ProbeShare share = {});

// The kernel's own moves since boot, host-wide: pages its reclaim demoted and its fault path
// promoted (/proc/vmstat pgdemote_*, pgpromote_success); nullopt if not readable (no such lines).
std::optional<std::uint64_t> kernel_moves(const HostPaths& host);

// How much a residency update read (for the log and the tests).
struct ResidencyReadCount {
  std::uint64_t pages = 0;          // pages asked about in all
  std::uint64_t probes = 0;         // one page each standing for a block
  std::uint64_t blocks_reread = 0;  // blocks whose probe disagreed
  bool evidence_exact = false;      // the pages with their own state read in full
};

// Reads t.reread (cleared) and, when `check`, the check's pages (`kernel_moved`:
// kernel_moves() now; its change since the last check decides evidence_exact); sets what it
// read in the heat table (nodes, the huge blocks of the ranges asked about in
// full); the caller takes the bytes per node from the table (HeatTable::bytes_per_node). The runs
// read in full, in address order, with every huge block the target now has (for the recording and
// the return watch); a failed query's message in `error`.
PageMap update_residency(ResidencyReader& reader, Target& t, TimeNs now, bool check,
                         std::uint64_t turn, std::optional<std::uint64_t> kernel_moved,
                         std::string* error, ResidencyReadCount* count = nullptr);

// The table's units as runs per node, address order (node -1: not known): what a
// read of every page would have found if the table is right (the return watch's arming).
PageMap table_runs(const policy::HeatTable& heat, TimeNs now);

}  // namespace kvtier::agent
