// kvtier_shared_pool: the guest-side workload of vm.shared_pool (issue 37). A KV
// pool of TOTAL MiB in one memfd, filled with a known pattern, mapped by two
// processes (this one and a child it forks; each maps the memfd itself, the
// child at another address). Each reads its own HOT MiB of the pool in a loop
// (the parent from HOT_A MiB on, the child from HOT_B MiB on), for SECONDS or
// until STOP_FILE exists, then
// checks every byte of the pool against the pattern. The child writes the
// pattern through its own mapping, so every page of the pool is in its page
// tables; the parent maps only what it reads: its hot part, and the last
// SHARED_COLD MiB once at the start (pages both map, which only
// MPOL_MF_MOVE_ALL moves). Prints, as soon as both
// map the pool, one JSON line per process with its pid and its pool and hot
// ranges; at the end one line per process: "VERIFIED <role> <bytes> <bad>".
// The exit status is 1 when a byte differs.
//
// Usage: kvtier_shared_pool [--total-mib N] [--hot-mib M] [--hot-a-mib A]
//                           [--hot-b-mib B] [--seconds S] [--stop-file F]
//                           [--shared-cold-mib K] [--flush-tlb 0|1]
// --flush-tlb 1: drop a 256 KiB scratch mapping after every pass, so that under
// QEMU TCG the accessed bits DAMON reads are set again (tests/vm/hotset.cpp).

#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace {

constexpr std::uint64_t kMiB = 1ULL << 20;
constexpr std::uint64_t kPage = 4096;

struct Args {
  std::uint64_t total_mib = 64;
  std::uint64_t hot_mib = 4;
  std::uint64_t hot_a_mib = 8;
  std::uint64_t hot_b_mib = 40;
  double seconds = 60;
  bool flush_tlb = false;
  std::string stop_file;
  std::uint64_t shared_cold_mib = 0;
};

bool parse(int argc, char** argv, Args& a) {
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    const char* v = argv[i + 1];
    if (k == "--total-mib") {
      a.total_mib = std::strtoull(v, nullptr, 10);
    } else if (k == "--hot-mib") {
      a.hot_mib = std::strtoull(v, nullptr, 10);
    } else if (k == "--hot-a-mib") {
      a.hot_a_mib = std::strtoull(v, nullptr, 10);
    } else if (k == "--hot-b-mib") {
      a.hot_b_mib = std::strtoull(v, nullptr, 10);
    } else if (k == "--seconds") {
      a.seconds = std::strtod(v, nullptr);
    } else if (k == "--shared-cold-mib") {
      a.shared_cold_mib = std::strtoull(v, nullptr, 10);
    } else if (k == "--stop-file") {
      a.stop_file = v;
    } else if (k == "--flush-tlb") {
      a.flush_tlb = std::strtoul(v, nullptr, 10) != 0;
    } else {
      return false;
    }
  }
  return (argc % 2) == 1 && a.hot_a_mib + a.hot_mib <= a.total_mib &&
         a.hot_b_mib + a.hot_mib <= a.total_mib && a.shared_cold_mib <= a.total_mib;
}

// The pattern: every 8-byte word is a function of its offset in the pool.
std::uint64_t word(std::uint64_t index) {
  return (index + 1) * 0x9E3779B97F4A7C15ULL;
}

char* map_pool(int fd, std::uint64_t bytes) {
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    std::perror("kvtier_shared_pool: mmap");
    std::exit(1);
  }
  return static_cast<char*>(p);
}

// Reads every page of [hot, hot + bytes) in a loop until `seconds` have passed.
std::uint64_t read_loop(const char* hot, std::uint64_t bytes, const Args& a) {
  constexpr std::size_t kScratch = 64 * kPage;
  char* scratch = static_cast<char*>(
      mmap(nullptr, kScratch, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  if (scratch == MAP_FAILED) {
    std::perror("kvtier_shared_pool: mmap scratch");
    std::exit(1);
  }
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(a.seconds);
  std::uint64_t passes = 0;
  std::uint64_t sum = 0;
  while (std::chrono::steady_clock::now() < end) {
    for (std::uint64_t off = 0; off < bytes; off += kPage) {
      sum += *reinterpret_cast<const volatile std::uint64_t*>(hot + off);
    }
    if (a.flush_tlb) {
      std::memset(scratch, 1, kScratch);
      madvise(scratch, kScratch, MADV_DONTNEED);
    }
    // The stop file is looked for every 64 passes (an access(2) each).
    if (++passes % 64 == 0 && !a.stop_file.empty() && access(a.stop_file.c_str(), F_OK) == 0) {
      break;
    }
  }
  std::fprintf(stderr, "kvtier_shared_pool: %d: %llu passes (sum %llx)\n", getpid(),
               static_cast<unsigned long long>(passes), static_cast<unsigned long long>(sum));
  return passes;
}

// Bytes of the pool that differ from the pattern.
std::uint64_t bad_bytes(const char* pool, std::uint64_t bytes) {
  std::uint64_t bad = 0;
  for (std::uint64_t i = 0; i < bytes / 8; ++i) {
    std::uint64_t w = 0;
    std::memcpy(&w, pool + i * 8, 8);
    if (w != word(i)) bad += 8;
  }
  return bad;
}

void print_ranges(const char* role, const char* pool, std::uint64_t bytes, std::uint64_t hot_mib,
                  std::uint64_t hot_at_mib) {
  const auto start = reinterpret_cast<std::uintptr_t>(pool);
  const std::uint64_t hot = start + hot_at_mib * kMiB;
  std::printf(
      "{\"role\": \"%s\", \"pid\": %d, \"start\": %llu, \"end\": %llu, \"hot_start\": %llu, "
      "\"hot_end\": %llu}\n",
      role, getpid(), static_cast<unsigned long long>(start),
      static_cast<unsigned long long>(start + bytes), static_cast<unsigned long long>(hot),
      static_cast<unsigned long long>(hot + hot_mib * kMiB));
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  if (!parse(argc, argv, a)) {
    std::fprintf(stderr,
                 "usage: kvtier_shared_pool [--total-mib N] [--hot-mib M] [--hot-a-mib A] "
                 "[--hot-b-mib B] [--seconds S] [--stop-file F] [--shared-cold-mib K] "
                 "[--flush-tlb 0|1]\n");
    return 2;
  }
  const std::uint64_t bytes = a.total_mib * kMiB;
  const int fd = memfd_create("kv-pool", 0);
  if (fd < 0 || ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    std::perror("kvtier_shared_pool: memfd");
    return 1;
  }
  int ready[2];
  if (pipe(ready) != 0) {
    std::perror("kvtier_shared_pool: pipe");
    return 1;
  }
  const pid_t child = fork();
  if (child < 0) {
    std::perror("kvtier_shared_pool: fork");
    return 1;
  }
  const bool parent = child != 0;
  close(ready[parent ? 1 : 0]);
  if (!parent) {
    // Another address than the parent's: a reservation first.
    if (mmap(nullptr, 16 * kMiB, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0) == MAP_FAILED) {
      std::perror("kvtier_shared_pool: mmap reservation");
      return 1;
    }
  }
  const char* role = parent ? "a" : "b";
  const std::uint64_t hot_at = parent ? a.hot_a_mib : a.hot_b_mib;
  char* pool = map_pool(fd, bytes);
  if (!parent) {
    // The child writes the whole pool (every page mapped in its page tables),
    // prints, and lets the parent go on: two whole lines, in order.
    for (std::uint64_t i = 0; i < bytes / 8; ++i) {
      const std::uint64_t w = word(i);
      std::memcpy(pool + i * 8, &w, 8);
    }
    print_ranges(role, pool, bytes, a.hot_mib, hot_at);
    close(ready[1]);
  } else {
    char c = 0;
    while (read(ready[0], &c, 1) > 0) {
    }
    // The last pages of the pool, read once: mapped by both processes, and cold.
    std::uint64_t sum = 0;
    for (std::uint64_t off = bytes - a.shared_cold_mib * kMiB; off < bytes; off += kPage) {
      sum += *reinterpret_cast<const volatile std::uint64_t*>(pool + off);
    }
    std::fprintf(stderr, "kvtier_shared_pool: %d read the last %llu MiB (sum %llx)\n", getpid(),
                 static_cast<unsigned long long>(a.shared_cold_mib),
                 static_cast<unsigned long long>(sum));
    print_ranges(role, pool, bytes, a.hot_mib, hot_at);
  }
  read_loop(pool + hot_at * kMiB, a.hot_mib * kMiB, a);
  const std::uint64_t bad = bad_bytes(pool, bytes);
  int status = 0;
  if (parent) waitpid(child, &status, 0);
  std::printf("VERIFIED %s %llu %llu\n", role, static_cast<unsigned long long>(bytes),
              static_cast<unsigned long long>(bad));
  std::fflush(stdout);
  const bool child_ok = !parent || (WIFEXITED(status) && WEXITSTATUS(status) == 0);
  return bad == 0 && child_ok ? 0 : 1;
}
