#pragma once
// DAMON's sysfs interface (/sys/kernel/mm/damon/admin): create kdamonds,
// give each one context with its operations (vaddr per process, paddr for
// physical memory), monitoring intervals, region bounds and targets, then turn
// it on and off. Shared by the DAMON source (vaddr monitoring) and the DAMOS
// mover, which adds its schemes under context_dir() itself. The root is a parameter so tests run it
// on a tree of plain files laid out like the kernel's.

#include <cstdint>
#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "agent/host/host_paths.hpp"
#include "policy/error.hpp"
#include "policy/types.hpp"

namespace kvtier::agent {

struct DamonIntervals {
  std::uint64_t sample_us = 5000;
  std::uint64_t aggr_us = 100000;
  std::uint64_t update_us = 1000000;
};

struct DamonRegionBounds {
  std::uint64_t min = 10;
  std::uint64_t max = 1000;
};

struct DamonTargetSpec {
  Pid pid = 0;                     // vaddr: the process; paddr: unused
  std::vector<AddrRange> regions;  // initial regions; empty lets DAMON pick (vaddr)
};

struct DamonContextSpec {
  std::string operations = "vaddr";
  DamonIntervals intervals;
  DamonRegionBounds nr_regions;
  std::vector<DamonTargetSpec> targets;
};

class DamonSysfs {
 public:
  explicit DamonSysfs(std::filesystem::path admin) : admin_(std::move(admin)) {}
  static DamonSysfs under(const HostPaths& paths) {
    return DamonSysfs(paths.sys / "kernel/mm/damon/admin");
  }

  [[nodiscard]] const std::filesystem::path& admin() const { return admin_; }
  [[nodiscard]] std::filesystem::path kdamond_dir(int kd) const;
  [[nodiscard]] std::filesystem::path context_dir(int kd, int ctx = 0) const;

  [[nodiscard]] Result<int> nr_kdamonds() const;
  // The kernel recreates every kdamond directory (losing their settings) and
  // refuses while any kdamond is on; call it once, before configuring.
  Result<void> set_nr_kdamonds(int n);
  // An index kvtier may configure: the first kdamond that is off, or a new
  // one when there are none. Fails when every kdamond is busy.
  Result<int> claim_kdamond();

  // Writes one context: operations, intervals, region bounds, targets and
  // their initial regions. The kdamond must be off.
  Result<void> configure(int kd, const DamonContextSpec& spec) const;
  // Replaces one target's initial regions (then "commit" applies them to a
  // running kdamond, which keeps what it learnt inside the new ranges).
  Result<void> set_regions(int kd, std::size_t target, std::span<const AddrRange> regions) const;
  [[nodiscard]] Result<std::vector<std::string>> avail_operations(int kd) const;

  // Which kdamond kvtier runs, in a small file (kvtierd's runtime directory), so that the next
  // kvtierd can tell kvtier's own kdamond, left on by a kvtierd killed before it could turn it
  // off, from another DAMON user's: "kdamond N pid P".
  Result<void> write_owner(const std::filesystem::path& file, int kd, Pid pid) const;
  // Turns off the kdamond `file` names if it still runs with the pid written there, and
  // removes the file; what it did in one line (nullopt: no file, nothing to do).
  std::optional<std::string> reclaim_leftover(const std::filesystem::path& file) const;

  Result<void> turn_on(int kd) const { return send(kd, "on"); }
  Result<void> turn_off(int kd) const { return send(kd, "off"); }
  // Any command `state` accepts: on, off, commit, update_schemes_stats,
  // update_schemes_tried_regions, ...
  Result<void> send(int kd, std::string_view command) const;
  [[nodiscard]] Result<std::string> state(int kd) const;
  // The kdamond thread's pid while it is on.
  [[nodiscard]] Result<Pid> kdamond_pid(int kd) const;

  // Writes `value` to a file under the admin root (errors name the file).
  Result<void> write(const std::filesystem::path& file, std::string_view value) const;

 private:
  std::filesystem::path admin_;
};

}  // namespace kvtier::agent
