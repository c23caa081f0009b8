#pragma once
// Which processes are targets: those the config's selectors pick from /proc
// (kvtierd itself and kernel threads never), each with its group, its comm,
// the anonymous mappings tracked in its heat table, and what the loop keeps
// about it between steps.

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "agent/host/host_paths.hpp"
#include "agent/loop/shared_pools.hpp"
#include "policy/config.hpp"
#include "policy/heat.hpp"
#include "policy/pinned.hpp"
#include "policy/types.hpp"

namespace kvtier::agent {

// The heatmap row's sum for one chunk whose pages have their own states (its
// tracked pages' heat at `tick` times 4 KiB), taken from the PagePack at
// `version`: while the pack is unchanged, the row ages the sum by the decay
// from `tick` instead of visiting its 512 pages (bin_heat, agent/loop/views.cpp).
struct ChunkHeatSum {
  std::uint64_t version = 0;
  std::uint32_t tick = 0;
  std::uint32_t row = 0;  // the last row that used it
  double sum = 0.0;
};
struct HeatRowCache {
  std::unordered_map<std::uint64_t, ChunkHeatSum> chunks;  // by the chunk's base
  std::uint32_t rows = 0;
};

struct Target {
  Pid pid = 0;
  std::size_t group = 0;  // index into Config::groups
  std::string comm;
  // Threads at the last step (/proc/PID/status; 0: not read). The kernel's NUMA
  // scan never unmaps a single-threaded process's pages on the node it runs
  // on, so its reads there cause no hint faults.
  std::uint32_t threads = 0;
  // Its CPU time (all threads, /proc/PID/stat) at the last steps, oldest
  // first, (when read, CPU time) pairs: the kernel's NUMA scan runs once per
  // scan period of the process's own CPU time, so a process that runs little
  // has its pages unmapped, and its reads seen by hint faults, seldom.
  std::vector<std::pair<TimeNs, TimeNs>> cpu_samples;
  // How often the scan goes through it at that CPU rate (0: not known yet),
  // and whether that is less often than once per its group's cold age
  // (update_scan_coverage, ingest.hpp): then hint faults do not see its reads,
  // so DAMON and the dirty scan watch it even where they would stand by.
  TimeNs scan_interval = 0;
  bool scan_blind = false;
  std::vector<AddrRange> vmas;  // tracked mappings (anonymous, and the pools it owns), sorted
  // Its mappings of shared pools another mapping tracks (SharedPools::borrowed):
  // the sources watch them, their heat is the owner's.
  std::vector<AddrRange> borrowed;
  std::unique_ptr<policy::HeatTable> heat;
  // From the last residency read (ResidencyReader::map).
  std::map<int, std::uint64_t> bytes_per_node;
  std::uint64_t not_present_bytes = 0;
  std::vector<std::uint64_t> huge_blocks;
  MoveStats moved;
  std::vector<PlannedMove> last_moves;
  // Pages on a slow node touched since they got there, by page address: when the
  // first of those touches happened (promotion latency is measured from it).
  std::map<std::uint64_t, TimeNs> first_slow_touch;
  // Pages with page-level samples this step: the kernel may have moved them
  // (promotion in the fault path), so the residency phase reads them again.
  std::vector<std::uint64_t> touched_pages;
  TimeNs last_full_residency = 0;  // the first full read, then the last check; 0: never read
  // What the residency phase reads whole at the next step (agent/loop/residency_check.hpp):
  // new mappings, and ranges a move left partly behind.
  std::vector<AddrRange> reread;
  // kernel_moves() at the last check (nullopt: none yet, or not readable).
  std::optional<std::uint64_t> kernel_moves_at_check;
  // Residency checks made (which blocks the next one probes: residency_check.hpp).
  std::uint64_t checks = 0;
  // Heat per address bin at each step, newest last (for `heatmap`).
  std::deque<std::vector<float>> history;
  // The heatmap row's sums of chunks whose pages have their own states (bin_heat).
  HeatRowCache row_cache;
  bool said_reservations = false;  // logged once that mappings were not tracked
  // Long-term pinned memory (agent/loop/pinned_tracker.hpp): the ranges the
  // planner leaves out, VmPin at the last read, when that was, and the
  // mappings then (a change forgets the mover's refusals).
  policy::PinnedMap pinned;
  std::optional<std::uint64_t> vm_pin_bytes;
  TimeNs pinned_read_at = 0;
  std::vector<AddrRange> pinned_vmas;
};

// The heat model a target of a group gets (half-life, granularity).
using HeatParamsFn = std::function<policy::HeatParams(std::size_t group)>;

class TargetSet {
 public:
  // `pools`: where track_vmas() keeps the shared pools (the residency reader
  // and the mover may read it too: through_sharers).
  TargetSet(HostPaths paths, Pid self,
            std::shared_ptr<SharedPools> pools = std::make_shared<SharedPools>());

  // Reads /proc: processes the config selects join (a target whose group
  // changed starts afresh), those gone or no longer selected leave. True when
  // the set of pids changed.
  bool discover(const policy::CompiledConfig& config, const HeatParamsFn& params);
  // One process that started or exec'd (the process watcher): it joins if the
  // config selects it, leaves if it was a target and no longer is. True when
  // the set of pids changed.
  bool consider(const policy::CompiledConfig& config, Pid pid, const HeatParamsFn& params);
  // A process that ended: it leaves now. True when it was a target.
  bool forget(Pid pid, std::string_view why = "is gone");
  // A new config: targets it no longer selects leave now; the others take
  // their new group and keep their heat unless their half-life changed (then
  // the table starts afresh and the mappings are tracked again next step).
  // True when a target left.
  bool rematch(const policy::CompiledConfig& config, const HeatParamsFn& params);
  // Tracks each target's movable anonymous mappings of 1 MiB or more
  // (/proc/PID/maps) in its heat table, and the shared pools it owns
  // (SharedPools: one owner per pool among the targets that map it; the
  // others' mappings are borrowed), and untracks those that went. At most
  // `host_bytes` (the host's memory; 0: no bound) are tracked per target: the
  // mappings past it are reservations that could never all be resident, and
  // are logged once per target.
  void track_vmas(TimeNs now, std::uint64_t host_bytes);

  [[nodiscard]] const std::map<Pid, Target>& all() const { return targets_; }
  [[nodiscard]] std::map<Pid, Target>& all() { return targets_; }
  [[nodiscard]] const Target* find(Pid pid) const;
  [[nodiscard]] Target* find(Pid pid);
  [[nodiscard]] std::size_t size() const { return targets_.size(); }
  [[nodiscard]] std::vector<Pid> pids() const;
  // The shared pools the targets map, as of the last track_vmas().
  [[nodiscard]] const SharedPools& pools() const { return *pools_; }

 private:
  struct Verdict {
    bool selected = false;
    bool changed = false;  // joined, or changed group (its heat starts afresh)
  };
  Verdict judge(const policy::CompiledConfig& config, Pid pid, const HeatParamsFn& params);

  HostPaths paths_;
  Pid self_;
  std::map<Pid, Target> targets_;
  std::shared_ptr<SharedPools> pools_;
};

}  // namespace kvtier::agent
