// Mover throughput against its baselines, measured in one run (in the tiered
// guest: scripts/vm/run -- kvtier_mover_bench). For 4 KiB pages and for 2 MiB
// transparent huge pages, the same buffer is moved node 0 -> node 1 by
//   - one raw move_pages call over every page (huge pages: their heads),
//   - one move_pages call per page (the naive loop),
//   - MovePagesMover (status query, batches, classification),
// and memcpy of the same bytes into node-1 memory gives the physical limit.
// A sweep over batch sizes picks the mover's batch first.

#include <numa.h>
#include <numaif.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "agent/host/residency.hpp"
#include "agent/movers/move_pages_mover.hpp"

namespace kvtier::bench {
namespace {

using agent::KpageflagsHugeProbe;
using agent::MovePagesMover;
using Clock = std::chrono::steady_clock;

char* map_aligned(std::size_t bytes, bool huge) {
  const std::size_t span = bytes + kHugePageSize;
  auto* raw = static_cast<char*>(
      mmap(nullptr, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  if (raw == MAP_FAILED) return nullptr;
  const auto addr = reinterpret_cast<std::uintptr_t>(raw);
  char* p = raw + (((addr + kHugePageSize - 1) & ~(kHugePageSize - 1)) - addr);
  madvise(p, bytes, huge ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
  std::memset(p, 0x42, bytes);
  return p;
}

struct Buffer {
  char* base = nullptr;
  std::size_t bytes = 0;
  std::size_t unit = kPageSize;  // kHugePageSize when THP-backed
  [[nodiscard]] AddrRange range() const {
    return {.start = reinterpret_cast<std::uint64_t>(base),
            .end = reinterpret_cast<std::uint64_t>(base) + bytes};
  }
  [[nodiscard]] std::vector<void*> unit_addrs() const {
    std::vector<void*> v;
    for (std::size_t off = 0; off < bytes; off += unit) v.push_back(base + off);
    return v;
  }
};

// One raw call moving every unit to `node`; returns pages left elsewhere.
long raw_move(const Buffer& b, int node) {
  auto addrs = b.unit_addrs();
  std::vector<int> nodes(addrs.size(), node);
  std::vector<int> status(addrs.size(), 0);
  return move_pages(0, addrs.size(), addrs.data(), nodes.data(), status.data(), MPOL_MF_MOVE);
}

std::uint64_t on_node(const Buffer& b, int node) {
  agent::ResidencyReader reader;
  const AddrRange r[] = {b.range()};
  auto res = reader.read(getpid(), r);
  return res ? (*res)[0].bytes_on(node) : 0;
}

// Median MiB/s of `reps` timed moves to node 1, each after an untimed return
// to node 0. A run that left pages behind is reported.
double measure(const Buffer& b, int reps, const std::function<void()>& to_node1) {
  std::vector<double> rates;
  for (int i = 0; i < reps; ++i) {
    raw_move(b, 0);
    if (on_node(b, 0) != b.bytes) fmt::print("  (warning: buffer not all on node 0 before run)\n");
    const auto t0 = Clock::now();
    to_node1();
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    const auto moved = on_node(b, 1);
    if (moved != b.bytes) {
      fmt::print("  (warning: {} of {} MiB reached node 1)\n", moved >> 20, b.bytes >> 20);
    }
    rates.push_back(static_cast<double>(b.bytes) / (1 << 20) / s);
  }
  std::sort(rates.begin(), rates.end());
  return rates[rates.size() / 2];
}

double mover_rate(const Buffer& b, std::size_t batch, int reps) {
  MovePagesMover mover({.batch_units = batch});
  const AddrRange r[] = {b.range()};
  const double rate = measure(b, reps, [&] {
    const auto st = mover.move(getpid(), r, 1);
    if (st.moved != st.requested) {
      fmt::print("  (mover: moved {} of {} pages, busy {}, other {})\n", st.moved, st.requested,
                 st.busy, st.other);
    }
  });
  return rate;
}

double memcpy_rate(const Buffer& b, int reps) {
  void* dst = numa_alloc_onnode(b.bytes, 1);
  std::memset(dst, 0, b.bytes);  // fault it in on node 1
  std::vector<double> rates;
  for (int i = 0; i < reps; ++i) {
    raw_move(b, 0);
    const auto t0 = Clock::now();
    std::memcpy(dst, b.base, b.bytes);
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    rates.push_back(static_cast<double>(b.bytes) / (1 << 20) / s);
  }
  numa_free(dst, b.bytes);
  std::sort(rates.begin(), rates.end());
  return rates[rates.size() / 2];
}

// The batch size: a sweep on 4 KiB pages (skipped when given, fixed_batch > 0).
std::size_t batch_sweep(const Buffer& small, int reps, std::size_t fixed_batch) {
  std::size_t best_batch = fixed_batch;
  double best = 0;
  std::vector<std::size_t> sweep = {16, 64, 256, 1024, 4096, 16384, 65536};
  if (fixed_batch > 0) sweep.clear();
  if (!sweep.empty()) {
    // Batch sizes take turns within each round (the host's load drifts).
    std::vector<std::vector<double>> rates(sweep.size());
    for (int round = 0; round < reps; ++round) {
      for (std::size_t i = 0; i < sweep.size(); ++i) {
        rates[i].push_back(mover_rate(small, sweep[i], 1));
      }
    }
    fmt::print("batch sweep (4 KiB pages):\n  {:>8} {:>10}\n", "batch", "MiB/s");
    for (std::size_t i = 0; i < sweep.size(); ++i) {
      std::sort(rates[i].begin(), rates[i].end());
      const double r = rates[i][rates[i].size() / 2];
      fmt::print("  {:>8} {:>10.1f}\n", sweep[i], r);
      if (r > best) {
        best = r;
        best_batch = sweep[i];
      }
    }
  }
  fmt::print("  chosen batch: {} units per call\n\n", best_batch);
  return best_batch;
}

// One row of the table: the mover, one raw move_pages call, a call per page and memcpy on
// buffer b. The host's load drifts while the guest runs: the four ways take turns
// within each round, and each figure is the median over the rounds.
void compare_ways(Buffer* b, std::size_t batch, int reps) {
  MovePagesMover mover({.batch_units = batch});
  const AddrRange r[] = {b->range()};
  MoveStats last;
  std::vector<std::function<void()>> ways = {[&] { last = mover.move(getpid(), r, 1); },
                                             [&] { raw_move(*b, 1); },
                                             [&] {
                                               for (void* a : b->unit_addrs()) {
                                                 int node = 1;
                                                 int status = 0;
                                                 move_pages(0, 1, &a, &node, &status, MPOL_MF_MOVE);
                                               }
                                             }};
  std::vector<std::vector<double>> rates(ways.size() + 1);
  for (int round = 0; round < reps; ++round) {
    // Each round starts with a different way, so none always runs first.
    for (std::size_t k = 0; k <= ways.size(); ++k) {
      const std::size_t w = (k + static_cast<std::size_t>(round)) % (ways.size() + 1);
      if (w == ways.size()) {
        rates[w].push_back(memcpy_rate(*b, 1));
      } else {
        rates[w].push_back(measure(*b, 1, ways[w]));
      }
    }
  }
  std::vector<double> med;
  for (auto& v : rates) {
    std::sort(v.begin(), v.end());
    med.push_back(v[v.size() / 2]);
  }
  fmt::print("{:<10} {:>10.1f} {:>12.1f} {:>12.1f} {:>10.1f} {:>11.0f}% {:>11.1f}x {:>12.0f}%\n",
             b->unit == kPageSize ? "4 KiB" : "2 MiB", med[0], med[1], med[2], med[3],
             100.0 * med[0] / med[1], med[0] / med[2], 100.0 * med[0] / med[3]);
  fmt::print("  (mover: {} calls for {} pages moved)\n", last.calls, last.moved);
}

int run(std::size_t mib, int reps, std::size_t fixed_batch) {
  if (numa_available() < 0 || numa_max_node() < 1) {
    fmt::print(
        "mover_bench: needs a second NUMA node with memory (run it in the guest: "
        "scripts/vm/run -- kvtier_mover_bench)\n");
    return 1;
  }
  spdlog::set_level(spdlog::level::warn);
  const std::size_t bytes = mib << 20;
  fmt::print("mover_bench: {} MiB buffer, median of {} runs, node 0 -> node 1\n\n", mib, reps);

  Buffer small{.base = map_aligned(bytes, false), .bytes = bytes, .unit = kPageSize};
  const std::size_t best_batch = batch_sweep(small, reps, fixed_batch);

  Buffer huge{.base = map_aligned(bytes, true), .bytes = bytes, .unit = kHugePageSize};
  KpageflagsHugeProbe probe;
  auto blocks = probe.huge_blocks(getpid(), huge.range());
  const std::size_t nblocks = blocks ? blocks->size() : 0;
  fmt::print("2 MiB buffer: {} of {} blocks are transparent huge pages\n\n", nblocks,
             bytes / kHugePageSize);

  fmt::print("{:<10} {:>10} {:>12} {:>12} {:>10} {:>12} {:>12} {:>13}\n", "pages", "mover",
             "raw 1 call", "per-page", "memcpy", "mover/raw", "mover/page", "mover/memcpy");
  for (Buffer* b : {&small, &huge}) compare_ways(b, best_batch, reps);
  fmt::print("\n(MiB/s; per-page = one move_pages call per page: 4 KiB pages, or 2 MiB heads)\n");
  return 0;
}

}  // namespace
}  // namespace kvtier::bench

int main(int argc, char** argv) {
  const std::size_t mib = argc > 1 ? std::strtoul(argv[1], nullptr, 10) : 64;
  const int reps = argc > 2 ? static_cast<int>(std::strtol(argv[2], nullptr, 10)) : 3;
  const std::size_t batch = argc > 3 ? std::strtoul(argv[3], nullptr, 10) : 0;
  return kvtier::bench::run(mib == 0 ? 64 : mib, reps < 1 ? 1 : reps, batch);
}
