#include "bench/kvsim/process.hpp"

#include <pthread.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstddef>
#include <cstdint>
#include <ctime>
#include <mutex>
#include <span>

namespace kvtier::bench::kvsim {
namespace {

volatile std::sig_atomic_t g_dump_truth = 0;
volatile std::sig_atomic_t g_stop = 0;

extern "C" void on_usr1(int /*sig*/) {
  g_dump_truth = 1;
}
extern "C" void on_stop(int /*sig*/) {
  g_stop = 1;
}

}  // namespace

TimeNs mono_now() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<TimeNs>(ts.tv_sec) * 1'000'000'000ULL + static_cast<TimeNs>(ts.tv_nsec);
}

void sleep_ns(TimeNs ns) {
  timespec ts{.tv_sec = static_cast<time_t>(ns / 1'000'000'000ULL),
              .tv_nsec = static_cast<long>(ns % 1'000'000'000ULL)};
  nanosleep(&ts, nullptr);  // a signal cuts it short, which is what we want
}

void flush_own_tlb() {
  constexpr std::size_t kScratch = std::size_t{64} * 4096;
  void* p = mmap(nullptr, kScratch, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return;
  for (std::size_t off = 0; off < kScratch; off += 4096) static_cast<volatile char*>(p)[off] = 1;
  munmap(p, kScratch);
}

void query_page_nodes(std::span<void* const> pages, std::span<int> nodes) {
  constexpr std::size_t kBatch = 4096;
  for (std::size_t i = 0; i < pages.size(); i += kBatch) {
    const std::size_t n = std::min(kBatch, pages.size() - i);
    // const_cast: the kernel reads the page list only.
    if (syscall(SYS_move_pages, 0, n, const_cast<void**>(pages.data() + i), nullptr,
                nodes.data() + i, 0) != 0) {
      std::fill_n(nodes.begin() + static_cast<std::ptrdiff_t>(i), n, -errno);
    }
  }
}

void install_signal_handlers() {
  struct sigaction sa {};
  sa.sa_handler = on_usr1;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGUSR1, &sa, nullptr);
  sa.sa_handler = on_stop;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
}

bool stop_requested() {
  return g_stop != 0;
}

bool take_truth_request() {
  if (g_dump_truth == 0) return false;
  g_dump_truth = 0;
  return true;
}

IdleThreads::IdleThreads(std::uint32_t n) {
  sigset_t all;
  sigset_t old;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, &old);
  threads_.reserve(n);
  for (std::uint32_t i = 0; i < n; ++i) {
    threads_.emplace_back([this] {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [this] { return stop_; });
    });
  }
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
}

IdleThreads::~IdleThreads() {
  {
    const std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  for (auto& t : threads_) t.join();
}

}  // namespace kvtier::bench::kvsim
