// kvtier_fill_check: a guest-side workload for vm.topology (issue 37). Maps
// MiB of anonymous memory in 4 KiB pages (MADV_NOHUGEPAGE), writes a pattern
// that differs in every 8-byte word (the word's index, scrambled), prints one
// JSON line {"pid":..,"start":..,"end":..} and then sleeps, idle, until SIGTERM
// or SECONDS pass. Then it reads every byte back and prints one JSON line
// {"checked_bytes":N,"corrupted_bytes":M}; exit status 0 when no byte differs,
// 3 when one does.
//
// Usage: kvtier_fill_check [--mib N] [--seconds S]

#include <sys/mman.h>

#include <unistd.h>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string>

namespace {

constexpr std::uint64_t kMiB = 1ULL << 20;

std::uint64_t word(std::uint64_t i) {
  return (i * 0x9E3779B97F4A7C15ULL) ^ (i >> 7) ^ 0x5AULL;
}

}  // namespace

int main(int argc, char** argv) {
  std::uint64_t mib = 16;
  long seconds = 3600;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    if (k == "--mib") {
      mib = std::strtoull(argv[i + 1], nullptr, 10);
    } else if (k == "--seconds") {
      seconds = std::strtol(argv[i + 1], nullptr, 10);
    } else {
      std::fprintf(stderr, "usage: kvtier_fill_check [--mib N] [--seconds S]\n");
      return 2;
    }
  }
  const std::uint64_t bytes = mib * kMiB;
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    std::perror("kvtier_fill_check: mmap");
    return 1;
  }
  madvise(p, bytes, MADV_NOHUGEPAGE);
  auto* w = static_cast<std::uint64_t*>(p);
  const std::uint64_t words = bytes / sizeof(std::uint64_t);
  for (std::uint64_t i = 0; i < words; ++i) w[i] = word(i);

  // SIGTERM ends the wait; blocked first so it cannot end the process.
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigprocmask(SIG_BLOCK, &set, nullptr);
  const auto start = reinterpret_cast<std::uintptr_t>(p);
  std::printf("{\"pid\":%d,\"start\":%ju,\"end\":%ju}\n", getpid(),
              static_cast<std::uintmax_t>(start), static_cast<std::uintmax_t>(start + bytes));
  std::fflush(stdout);
  timespec limit{.tv_sec = seconds, .tv_nsec = 0};
  sigtimedwait(&set, nullptr, &limit);

  std::uint64_t corrupted = 0;
  const auto* b = static_cast<const unsigned char*>(p);
  for (std::uint64_t i = 0; i < words; ++i) {
    const std::uint64_t want = word(i);
    if (std::memcmp(b + i * sizeof want, &want, sizeof want) == 0) continue;
    for (std::size_t j = 0; j < sizeof want; ++j) {
      if (b[i * sizeof want + j] != reinterpret_cast<const unsigned char*>(&want)[j]) ++corrupted;
    }
  }
  std::printf("{\"checked_bytes\":%ju,\"corrupted_bytes\":%ju}\n",
              static_cast<std::uintmax_t>(bytes), static_cast<std::uintmax_t>(corrupted));
  return corrupted == 0 ? 0 : 3;
}
