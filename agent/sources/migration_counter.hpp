#pragma once
// What the kernel itself migrates, per reason (reclaim demotion, NUMA
// balancing promotion, DAMOS, move_pages, compaction...), from
// migrate:mm_migrate_pages (bpf/migrate.bpf.c). kvtierd does not run it yet
// (issue 11 uses it to count the kernel's own promotions and demotions beside
// kvtier's moves); `kvtierctl sources` probes it, kvtier_source_run and
// tests/privileged/sources_test.cpp run it.

#include <array>
#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "agent/host/availability.hpp"
#include "agent/host/host_paths.hpp"
#include "policy/error.hpp"

namespace kvtier::agent {

inline constexpr std::size_t kMigrateReasons = 11;  // KVT_MR_NR in bpf/kvtier_abi.h

std::string_view migrate_reason_name(std::size_t reason);

struct MigrateReasonCounts {
  std::uint64_t calls = 0;
  std::uint64_t succeeded = 0;  // pages (base pages; THPs count their subpages)
  std::uint64_t failed = 0;
  std::uint64_t thp_succeeded = 0;
  std::uint64_t thp_failed = 0;
  std::uint64_t thp_split = 0;
};

struct MigrationCounts {
  std::array<MigrateReasonCounts, kMigrateReasons> by_reason{};
  [[nodiscard]] MigrateReasonCounts total() const;
};

class MigrationCounter {
 public:
  explicit MigrationCounter(HostPaths paths);
  ~MigrationCounter();
  MigrationCounter(const MigrationCounter&) = delete;
  MigrationCounter& operator=(const MigrationCounter&) = delete;

  [[nodiscard]] Availability probe() const;
  Result<void> start();
  void stop();
  // Totals since start().
  [[nodiscard]] Result<MigrationCounts> read() const;
  [[nodiscard]] std::vector<int> program_fds() const;

 private:
  struct Bpf;
  HostPaths paths_;
  std::unique_ptr<Bpf> bpf_;
};

}  // namespace kvtier::agent
