#pragma once
// The mover that lets the kernel move: DAMON monitors physical memory and a
// DAMOS scheme migrates regions that match an access pattern (cold: migrate to
// the slow node; hot: back) to `target_nid`, within quotas. On 6.11/6.12 the
// migrate actions only act in `paddr` contexts, so a process is selected with
// DAMOS filters (its memory cgroup), not by pid. Everything goes through
// /sys/kernel/mm/damon/admin under HostPaths::sys.
//
// DAMOS works in the background: move() does not move the given ranges itself;
// it (re)starts the schemes if needed and reports what the schemes whose
// target_nid is `to_node` did since the previous call.

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "agent/host/availability.hpp"
#include "agent/host/damon_sysfs.hpp"
#include "agent/host/host_paths.hpp"
#include "agent/movers/mover.hpp"
#include "policy/error.hpp"

namespace kvtier::agent {

enum class DamosAction : std::uint8_t { kMigrateCold, kMigrateHot, kStat, kPageout };

// Bounds a region must fall in for the scheme to act on it. nr_accesses counts
// sampling checks that found the region accessed per aggregation interval;
// age counts aggregation intervals the count has stayed about the same.
struct DamosAccessPattern {
  std::uint64_t sz_min = 0;
  std::uint64_t sz_max = std::numeric_limits<std::uint64_t>::max();
  std::uint32_t nr_accesses_min = 0;
  std::uint32_t nr_accesses_max = std::numeric_limits<std::uint32_t>::max();
  std::uint32_t age_min = 0;
  std::uint32_t age_max = std::numeric_limits<std::uint32_t>::max();
};

// At most `bytes` (and `ms` of CPU) per reset interval; 0 = no limit. Under the
// quota the kernel picks regions by the weighted priority.
struct DamosQuota {
  std::uint64_t ms = 0;
  std::uint64_t bytes = 0;
  std::uint64_t reset_interval_ms = 1000;
  std::uint32_t weight_sz_permil = 0;
  std::uint32_t weight_nr_accesses_permil = 0;
  std::uint32_t weight_age_permil = 0;
};

// 6.12 filters exclude: a page is skipped if it matches and `matching` is true,
// or does not match and `matching` is false.
struct DamosFilter {
  enum class Type : std::uint8_t { kAnon, kMemcg, kYoung, kAddr, kTarget };
  Type type = Type::kAnon;
  bool matching = true;
  std::string memcg_path;  // kMemcg: path below the cgroup2 root, e.g. "/kvtier/llm"
  AddrRange addr;          // kAddr
  int target_idx = 0;      // kTarget
};

struct DamosScheme {
  DamosAction action = DamosAction::kMigrateCold;
  int target_nid = -1;
  DamosAccessPattern pattern;
  DamosQuota quota;
  std::vector<DamosFilter> filters;
  std::uint64_t apply_interval_us = 0;  // 0: every aggregation interval
};

struct DamosSetup {
  unsigned kdamond = 0;  // index under kdamonds/
  std::string operations = "paddr";
  Pid pid_target = 0;  // vaddr operations only
  std::uint64_t sample_us = 5'000;
  std::uint64_t aggr_us = 100'000;
  std::uint64_t update_us = 1'000'000;
  std::uint64_t min_nr_regions = 10;
  std::uint64_t max_nr_regions = 1000;
  // Address ranges to monitor (physical for paddr); empty: the kernel's default.
  std::vector<AddrRange> regions;
  std::vector<DamosScheme> schemes;
};

struct DamosSchemeStats {
  std::uint64_t nr_tried = 0;
  std::uint64_t sz_tried = 0;
  std::uint64_t nr_applied = 0;
  std::uint64_t sz_applied = 0;
  std::uint64_t qt_exceeds = 0;
};

class DamosMover final : public Mover {
 public:
  DamosMover(HostPaths host, DamosSetup setup);
  ~DamosMover() override;

  [[nodiscard]] std::string_view name() const override { return "damos"; }
  [[nodiscard]] bool moves_in_call() const override { return false; }
  // Starts the schemes if they are not running, then returns, for the schemes
  // migrating to `to_node`: requested = pages tried, moved = pages applied,
  // other = tried but not applied (filtered out, or migration failed).
  MoveStats move(Pid pid, std::span<const AddrRange> ranges, int to_node) override;

  // Writes the whole kdamond tree and turns it on (off first if it ran).
  Result<void> start();
  Result<void> stop();
  [[nodiscard]] bool running() const { return running_; }
  // Asks the kernel to refresh the stats files, then reads one entry per scheme.
  Result<std::vector<DamosSchemeStats>> read_stats();

  // DAMON sysfs present (kernel with CONFIG_DAMON_SYSFS)?
  static Availability probe(const HostPaths& host);
  // The physical address ranges of a node's memory blocks, merged.
  static Result<std::vector<AddrRange>> node_physical_ranges(const HostPaths& host, int node);
  // The cgroup2 path of a process ("/" for the root), for a memcg filter.
  static Result<std::string> memcg_path_of(const HostPaths& host, Pid pid);

 private:
  [[nodiscard]] int kdamond() const { return static_cast<int>(setup_.kdamond); }
  // Writes under this mover's kdamond directory.
  Result<void> write(const std::filesystem::path& rel, std::string_view value) const;

  HostPaths host_;
  DamosSetup setup_;
  DamonSysfs damon_;
  bool running_ = false;
  std::vector<DamosSchemeStats> last_;
};

std::string_view to_string(DamosAction action);

}  // namespace kvtier::agent
