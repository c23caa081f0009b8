#pragma once
// The kernel's memory-tiering knobs kvtier leans on. With NUMA balancing in tiering mode
// (kernel.numa_balancing bit 2) the kernel unmaps pages on slower tiers now and then; the next
// access to such a page takes a NUMA hint fault, which kvtier's fault source sees page by page,
// and the kernel may promote the page in the fault path itself, before the access completes.
// Three debugfs knobs shape that (/sys/kernel/debug/sched/numa_balancing/):
//   hot_threshold_ms    a hint fault promotes only if the page was unmapped less than this long
//                       ago; kvtier decides coldness itself, so it raises the threshold to
//                       promote on the first access of a demoted page;
//   scan_period_min_ms, scan_period_max_ms
//                       how often a task's memory is unmapped, in the task's own CPU time: a
//                       process that mostly waits (an inference server between batches) is
//                       scanned rarely, and a page kvtier demoted stays mapped (its accesses
//                       invisible) until the next scan;
//   scan_size_mb        how much one scan unmaps at most; the period's floor is this size
//                       over 2560 MB per second of the task's CPU time, so a smaller size lets
//                       a task that uses little CPU be scanned more often.
// And one sysctl, /proc/sys/kernel/numa_balancing_promote_rate_limit_MBps (6.0+): at most this
// many MB a second are promoted in fault paths (where the copy runs in the faulting thread);
// past it the kernel leaves the page where it is for the rest of the second.
// kvtierd applies what the config asks at start and puts back what it found when it stops.
// What it found is also kept in a journal file (in kvtierd's runtime directory), so that a
// kvtierd killed before it could put the knobs back (SIGKILL, the watchdog's SIGABRT) leaves
// the host's own values to the next one, which restores them when it stops.

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "agent/host/host_paths.hpp"
#include "policy/error.hpp"

namespace kvtier::agent {

// kernel.numa_balancing bits (include/linux/sched/sysctl.h).
inline constexpr std::uint64_t kNumaBalancingNormal = 1;
inline constexpr std::uint64_t kNumaBalancingTiering = 2;

// What the kernel has now; a knob the kernel lacks (no debugfs, an old kernel) is nullopt.
struct TieringKnobValues {
  std::optional<std::uint64_t> numa_balancing;
  std::optional<std::uint64_t> hot_threshold_ms;
  std::optional<std::uint64_t> scan_period_min_ms;
  std::optional<std::uint64_t> scan_period_max_ms;
  std::optional<std::uint64_t> scan_size_mb;
  std::optional<std::uint64_t> promote_rate_limit_mbps;

  [[nodiscard]] bool tiering() const {
    return numa_balancing && (*numa_balancing & kNumaBalancingTiering) != 0;
  }
  friend bool operator==(const TieringKnobValues&, const TieringKnobValues&) = default;
};

// What kvtierd is asked to set; nullopt leaves a knob as the host has it.
struct TieringWish {
  std::uint64_t balancing_bits = 0;  // ORed into kernel.numa_balancing (0: left alone)
  std::optional<std::uint64_t> hot_threshold_ms;
  std::optional<std::uint64_t> scan_period_min_ms;
  std::optional<std::uint64_t> scan_period_max_ms;
  std::optional<std::uint64_t> scan_size_mb;
  std::optional<std::uint64_t> promote_rate_limit_mbps;
};

class KernelTiering {
 public:
  explicit KernelTiering(HostPaths paths) : paths_(std::move(paths)) {}
  ~KernelTiering() = default;
  KernelTiering(const KernelTiering&) = delete;
  KernelTiering& operator=(const KernelTiering&) = delete;

  // Where the replaced values are kept until restore() (kvtierd: its runtime directory's
  // tiering.saved); unset: nowhere. Set it before the first apply().
  void set_journal(std::filesystem::path journal) { journal_ = std::move(journal); }

  [[nodiscard]] TieringKnobValues read() const;
  // NUMA hint faults since boot, host-wide (/proc/vmstat numa_hint_faults).
  [[nodiscard]] Result<std::uint64_t> hint_faults() const;
  // Sets what `wish` asks and remembers the values it replaced (only the first time a knob is
  // changed, so a reload that changes a knob again still restores the host's own value).
  // Returns one line per knob changed; a knob that cannot be written is an error naming its
  // file, and what was already changed stays recorded for restore().
  // The first apply() first reads the journal a previous kvtierd left (it did not restore):
  // its values are the host's own, restored by restore(); one line says so per knob.
  Result<std::vector<std::string>> apply(const TieringWish& wish);
  // Puts back every knob apply() changed; one line per knob restored or failed. Idempotent.
  // Removes the journal once every knob is back (keeps the ones that failed in it).
  std::vector<std::string> restore();

 private:
  struct Saved {
    std::string file;
    std::uint64_t value = 0;
  };
  Result<std::optional<std::string>> set(const std::string& file, std::uint64_t value);
  [[nodiscard]] std::string path_of(const std::string& file) const;
  // Reads the journal into saved_ (once); one line per knob taken from it, or why not.
  std::vector<std::string> recover();
  // Writes saved_ to the journal (a new file renamed over the old); "" or why it failed.
  std::string write_journal() const;

  HostPaths paths_;
  std::filesystem::path journal_;
  bool recovered_ = false;
  std::vector<Saved> saved_;
};

}  // namespace kvtier::agent
