// kvtier_hotset: a guest-side workload for the source tests. Maps TOTAL MiB,
// touches all of it once, then keeps HOT MiB (at OFFSET MiB) hot by writing
// every page of it in a loop, on THREADS threads, for SECONDS. Prints one JSON
// line with its pid and the buffer and hot ranges before the hot loop starts.
//
// Usage: kvtier_hotset [--total-mib N] [--hot-mib M] [--hot-offset-mib O]
//                      [--seconds S] [--threads T] [--node1-mib K] [--flush-tlb 0|1]
//                      [--go-file F]
// --node1-mib K binds the first K MiB of the buffer to NUMA node 1 (mbind)
// before it is touched, so NUMA balancing has lower-tier pages to sample.
// --go-file F waits, after printing the JSON line, until F exists before the
// hot loop starts (so a sampler can attach first).
// --flush-tlb 1 drops a 256 KiB scratch mapping after every pass over the
// hot set, which makes the kernel flush this process's TLB. Under QEMU TCG
// the software TLB is so large that it never evicts the hot pages, so the
// CPU never sets an accessed bit again after DAMON clears it and DAMON sees
// no access at all; real TLBs evict all the time.

#include <linux/mempolicy.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace {

struct Args {
  std::uint64_t total_mib = 64;
  std::uint64_t hot_mib = 8;
  std::uint64_t hot_offset_mib = 24;
  double seconds = 10;
  unsigned threads = 1;
  std::uint64_t node1_mib = 0;
  bool flush_tlb = false;
  std::string go_file;
};

bool parse(int argc, char** argv, Args& a) {
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    const char* v = argv[i + 1];
    if (k == "--total-mib") {
      a.total_mib = std::strtoull(v, nullptr, 10);
    } else if (k == "--hot-mib") {
      a.hot_mib = std::strtoull(v, nullptr, 10);
    } else if (k == "--hot-offset-mib") {
      a.hot_offset_mib = std::strtoull(v, nullptr, 10);
    } else if (k == "--seconds") {
      a.seconds = std::strtod(v, nullptr);
    } else if (k == "--threads") {
      a.threads = static_cast<unsigned>(std::strtoul(v, nullptr, 10));
    } else if (k == "--go-file") {
      a.go_file = v;
    } else if (k == "--flush-tlb") {
      a.flush_tlb = std::strtoul(v, nullptr, 10) != 0;
    } else if (k == "--node1-mib") {
      a.node1_mib = std::strtoull(v, nullptr, 10);
    } else {
      return false;
    }
  }
  return (argc % 2) == 1 && a.hot_offset_mib + a.hot_mib <= a.total_mib && a.threads > 0 &&
         a.node1_mib <= a.total_mib;
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  if (!parse(argc, argv, a)) {
    std::fprintf(stderr,
                 "usage: kvtier_hotset [--total-mib N] [--hot-mib M] [--hot-offset-mib O] "
                 "[--seconds S] [--threads T] [--node1-mib K] [--flush-tlb 0|1] [--go-file F]\n");
    return 2;
  }
  constexpr std::uint64_t kMiB = 1ULL << 20;
  const std::uint64_t bytes = a.total_mib * kMiB;
  void* mem = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (mem == MAP_FAILED) {
    std::perror("kvtier_hotset: mmap");
    return 1;
  }
  auto* buf = static_cast<char*>(mem);
  // 4 KiB pages only: a THP would make one fault (and one DAMON check) per 2 MiB.
  madvise(buf, bytes, MADV_NOHUGEPAGE);
  if (a.node1_mib > 0) {
    unsigned long mask = 1UL << 1;
    if (syscall(SYS_mbind, buf, a.node1_mib * kMiB, MPOL_BIND, &mask, 8 * sizeof(mask), 0) != 0) {
      std::perror("kvtier_hotset: mbind node 1");
      return 1;
    }
  }
  std::memset(buf, 1, bytes);
  if (a.node1_mib > 0) {
    // Back to the default policy so NUMA balancing may promote the pages.
    if (syscall(SYS_mbind, buf, a.node1_mib * kMiB, MPOL_DEFAULT, nullptr, 0, 0) != 0) {
      std::perror("kvtier_hotset: mbind default");
      return 1;
    }
  }
  const auto start = reinterpret_cast<std::uintptr_t>(buf);
  const std::uint64_t hot_start = start + a.hot_offset_mib * kMiB;
  const std::uint64_t hot_end = hot_start + a.hot_mib * kMiB;
  std::printf(
      "{\"pid\": %d, \"start\": %llu, \"end\": %llu, \"hot_start\": %llu, \"hot_end\": %llu}\n",
      getpid(), static_cast<unsigned long long>(start),
      static_cast<unsigned long long>(start + bytes), static_cast<unsigned long long>(hot_start),
      static_cast<unsigned long long>(hot_end));
  std::fflush(stdout);

  while (!a.go_file.empty() && access(a.go_file.c_str(), F_OK) != 0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  // More pages than the kernel's single-page flush ceiling (33): dropping
  // them flushes the whole TLB of the process.
  constexpr std::size_t kScratch = 64 * 4096;
  char* scratch = static_cast<char*>(
      mmap(nullptr, kScratch, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  if (scratch == MAP_FAILED) {
    std::perror("kvtier_hotset: mmap scratch");
    return 1;
  }
  std::atomic<bool> stop{false};
  std::atomic<std::uint64_t> passes{0};
  std::vector<std::thread> threads;
  for (unsigned t = 0; t < a.threads; ++t) {
    threads.emplace_back([&] {
      while (!stop.load(std::memory_order_relaxed)) {
        for (std::uint64_t p = hot_start; p < hot_end; p += 4096) {
          volatile char* c = reinterpret_cast<volatile char*>(p);
          *c = static_cast<char>(*c + 1);
        }
        if (a.flush_tlb) {
          std::memset(scratch, 1, kScratch);
          madvise(scratch, kScratch, MADV_DONTNEED);
        }
        passes.fetch_add(1, std::memory_order_relaxed);
      }
    });
  }
  std::this_thread::sleep_for(std::chrono::duration<double>(a.seconds));
  stop = true;
  for (auto& t : threads) t.join();
  std::fprintf(stderr, "kvtier_hotset: %llu passes over the hot set\n",
               static_cast<unsigned long long>(passes.load()));
  return 0;
}
