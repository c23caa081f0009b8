#include "agent/sources/migration_counter.hpp"

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <fmt/format.h>

#include <array>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string_view>
#include <utility>
#include <vector>

#include "agent/host/availability.hpp"
#include "agent/host/host_paths.hpp"
#include "agent/sources/bpf_skeleton.hpp"
#include "agent/sources/probes.hpp"
#include "bpf/kvtier_abi.h"
#include "migrate.skel.h"
#include "policy/error.hpp"

namespace kvtier::agent {

static_assert(kMigrateReasons == KVT_MR_NR);

std::string_view migrate_reason_name(std::size_t reason) {
  static constexpr std::array<std::string_view, kMigrateReasons> kNames = {
      "compaction",      "memory_failure", "memory_hotplug", "syscall",
      "mempolicy_mbind", "numa_misplaced", "contig_range",   "longterm_pin",
      "demotion",        "damon",          "other"};
  return reason < kNames.size() ? kNames.at(reason) : "?";
}

MigrateReasonCounts MigrationCounts::total() const {
  MigrateReasonCounts t;
  for (const auto& r : by_reason) {
    t.calls += r.calls;
    t.succeeded += r.succeeded;
    t.failed += r.failed;
    t.thp_succeeded += r.thp_succeeded;
    t.thp_failed += r.thp_failed;
    t.thp_split += r.thp_split;
  }
  return t;
}

struct MigrationCounter::Bpf {
  BpfSkeleton<migrate_bpf> skel{"migration counter (bpf/migrate.bpf.c)"};
};

MigrationCounter::MigrationCounter(HostPaths paths) : paths_(std::move(paths)) {}
MigrationCounter::~MigrationCounter() {
  stop();
}

Availability MigrationCounter::probe() const {
  if (auto a = probe_btf(paths_); !a.ok) return a;
  if (auto a = probe_bpf_kernel_reads(paths_, "the migration counter"); !a.ok) return a;
  if (auto a = probe_bpf_privileges(); !a.ok) return a;
  if (auto a = probe_tracepoint(paths_, "migrate", "mm_migrate_pages"); !a.ok) return a;
  auto n = tracepoint_arg_count(paths_, "mm_migrate_pages");
  if (n && *n != 7 && *n != 8) {
    return unavailable(
        fmt::format("migrate:mm_migrate_pages has {} arguments; kvtier knows 7 and 8", *n));
  }
  return available("ok: kernel migrations per reason via migrate:mm_migrate_pages");
}

Result<void> MigrationCounter::start() {
  if (bpf_) return {};
  // The reason is the last argument; pick the program built for this prototype.
  auto n = tracepoint_arg_count(paths_, "mm_migrate_pages");
  if (!n) return std::unexpected(n.error());
  if (*n != 7 && *n != 8) {
    return fail(fmt::format("migrate:mm_migrate_pages has {} arguments; kvtier knows 7 and 8", *n));
  }
  auto b = std::make_unique<Bpf>();
  if (auto ok = b->skel.open(); !ok) return ok;
  bpf_program__set_autoload(b->skel->progs.kvt_mm_migrate_pages8, *n == 8);
  bpf_program__set_autoload(b->skel->progs.kvt_mm_migrate_pages7, *n == 7);
  if (auto ok = b->skel.load(); !ok) return ok;
  if (auto ok = b->skel.attach(); !ok) return ok;
  bpf_ = std::move(b);
  return {};
}

void MigrationCounter::stop() {
  bpf_.reset();
}

Result<MigrationCounts> MigrationCounter::read() const {
  if (!bpf_) return fail("migration counter: not started");
  const int ncpu = libbpf_num_possible_cpus();
  if (ncpu <= 0) return fail("cannot count possible CPUs", -ncpu);
  std::vector<kvt_migrate_counters> per_cpu(static_cast<std::size_t>(ncpu));
  MigrationCounts out;
  const int fd = bpf_map__fd(bpf_->skel->maps.migrations);
  for (std::uint32_t r = 0; r < kMigrateReasons; ++r) {
    if (bpf_map_lookup_elem(fd, &r, per_cpu.data()) != 0) {
      const int err = errno;
      return fail(fmt::format("migration counter: lookup {}: {}", r, errno_text(err)), err);
    }
    auto& dst = out.by_reason.at(r);
    for (const auto& c : per_cpu) {
      dst.calls += c.calls;
      dst.succeeded += c.succeeded;
      dst.failed += c.failed;
      dst.thp_succeeded += c.thp_succeeded;
      dst.thp_failed += c.thp_failed;
      dst.thp_split += c.thp_split;
    }
  }
  return out;
}

std::vector<int> MigrationCounter::program_fds() const {
  if (!bpf_) return {};
  std::vector<int> fds;
  for (bpf_program* p :
       {bpf_->skel->progs.kvt_mm_migrate_pages8, bpf_->skel->progs.kvt_mm_migrate_pages7}) {
    if (bpf_program__fd(p) >= 0) fds.push_back(bpf_program__fd(p));
  }
  return fds;
}

}  // namespace kvtier::agent
