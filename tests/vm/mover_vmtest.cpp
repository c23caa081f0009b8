// Guest-side checks of the movers against a real second NUMA node (run by the
// tests/vm/movers_*.sh scripts through scripts/vm/run). Each case prints its
// figures and one "PASS <case>" or "FAIL <case>: why" line; exit status 0 = pass.
//
//   kvtier_mover_vmtest integrity   moves a live, checksummed buffer back and forth
//   kvtier_mover_vmtest gone        the process exits while its pages are being moved
//   kvtier_mover_vmtest pinned      io_uring registered buffers are reported pinned
//   kvtier_mover_vmtest full        node 1 smaller than the buffer: demotion stops, no loss
//   kvtier_mover_vmtest damos       DAMOS demotes the cold part, keeps the hot set on node 0

#include <liburing.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include "agent/host/residency.hpp"
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
    usleep(300'000);
    _exit(0);
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

int case_damos(int seconds) {
  constexpr std::size_t kBytes = 64ULL << 20;
  constexpr std::size_t kHot = 8ULL << 20;
  char* p = map_aligned(kBytes, false);
  std::memset(p, 0x11, kBytes);
  const Pid self = getpid();
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
  auto memcg = DamosMover::memcg_path_of({}, self);
  auto node0 = DamosMover::node_physical_ranges({}, 0);
  if (!memcg || !node0) {
    fmt::print("FAIL damos: {}\n", !memcg ? memcg.error().message : node0.error().message);
    stop = true;
    hot.join();
    return 1;
  }
  fmt::print("damos: memcg {}, node 0 physical ranges {}\n", *memcg, node0->size());
  // Cold: no access seen for age_min aggregation intervals (100 ms each).
  DamosSetup setup{
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
  DamosMover mover({}, setup);
  const AddrRange hot_r{.start = reinterpret_cast<std::uint64_t>(p),
                        .end = reinterpret_cast<std::uint64_t>(p) + kHot};
  const AddrRange cold_r{.start = hot_r.end, .end = reinterpret_cast<std::uint64_t>(p) + kBytes};
  MoveStats total;
  double cold_pct = 0;
  double hot_pct = 0;
  const auto t0 = Clock::now();
  for (int t = 0; t < seconds; t += 2) {
    std::this_thread::sleep_for(std::chrono::seconds(2));
    const auto st = mover.move(self, {}, 1);
    total += st;
    cold_pct = 100.0 * static_cast<double>(bytes_on(self, cold_r, 1)) /
               static_cast<double>(cold_r.bytes());
    hot_pct =
        100.0 * static_cast<double>(bytes_on(self, hot_r, 0)) / static_cast<double>(hot_r.bytes());
    fmt::print(
        "damos t={:.0f}s: applied {} MiB (tried {} MiB); cold on node 1 {:.1f}%, hot on "
        "node 0 {:.1f}%\n",
        std::chrono::duration<double>(Clock::now() - t0).count(), st.bytes_moved >> 20,
        (st.requested * kPageSize) >> 20, cold_pct, hot_pct);
    std::fflush(stdout);
    if (cold_pct >= 90.0 && t >= 10) break;
  }
  stop = true;
  hot.join();
  auto stats = mover.read_stats();
  if (stats) {
    const auto& s = (*stats)[0];
    fmt::print("damos stats: nr_tried={} sz_tried={} nr_applied={} sz_applied={} qt_exceeds={}\n",
               s.nr_tried, s.sz_tried, s.nr_applied, s.sz_applied, s.qt_exceeds);
  }
  (void)mover.stop();
  fmt::print("damos result: cold part on node 1 {:.1f}%, hot set on node 0 {:.1f}%\n", cold_pct,
             hot_pct);
  check(cold_pct >= 90.0, "at least 90% of the cold part demoted");
  check(hot_pct >= 90.0, "at least 90% of the hot set kept on node 0");
  check(total.moved > 0, "DAMOS stats report applied bytes");
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
  if (which == "damos") rc = case_damos(argc > 2 ? std::atoi(argv[2]) : 60);
  if (rc == 2) {
    fmt::print(stderr, "usage: kvtier_mover_vmtest integrity|gone|pinned|full|damos [seconds]\n");
    return 2;
  }
  if (rc != 0 || failures > 0) {
    fmt::print("FAIL {}: {} checks failed\n", which, failures);
    return 1;
  }
  fmt::print("PASS {}\n", which);
  return 0;
}
