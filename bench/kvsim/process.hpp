#pragma once
// What kvsim asks of its process and the kernel: the clock, sleeping, its TLB, the node of its
// pages, idle threads, and the signals that stop it or ask for the ground truth.

#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <span>
#include <stdexcept>
#include <thread>
#include <utility>
#include <vector>

#include "policy/error.hpp"
#include "policy/types.hpp"

namespace kvtier::bench::kvsim {

using kvtier::TimeNs;

TimeNs mono_now();
// Sleeps `ns`, or less: a signal cuts it short, which is what kvsim wants.
void sleep_ns(TimeNs ns);

// Unmapping more pages than the kernel flushes one by one (33) flushes the
// whole TLB of the process. Under QEMU TCG the software TLB never evicts the
// pool's translations, so after DAMON clears a page's accessed bit the CPU
// would never set it again; real TLBs evict all the time.
void flush_own_tlb();

// move_pages(2) with no target nodes reports the node of each page (or -errno) and moves
// nothing; calling the syscall directly keeps kvsim free of libnuma.
void query_page_nodes(std::span<void* const> pages, std::span<int> nodes);

// Before the start event: a driver may signal as soon as it has read the pid. SIGINT and
// SIGTERM ask kvsim to stop; SIGUSR1 to write its ground truth.
void install_signal_handlers();
// Whether SIGINT or SIGTERM came.
bool stop_requested();
// Whether SIGUSR1 came since the last call.
bool take_truth_request();

// Threads that only wait until kvsim ends. An inference server has many threads; kvsim's
// work runs on one. The kernel's NUMA scan leaves a single-threaded process's pages on its own
// node mapped (mm/mprotect.c), so with no other thread its reads of them cause no NUMA hint
// fault; with these, they do, as a server's would. They run nothing and take no signal.
class IdleThreads {
 public:
  explicit IdleThreads(std::uint32_t n);
  ~IdleThreads();
  IdleThreads(const IdleThreads&) = delete;
  IdleThreads& operator=(const IdleThreads&) = delete;

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::vector<std::thread> threads_;
};

// Fails with one line naming what to fix; exceptions stop here.
template <class T>
T need(kvtier::Result<T> r) {
  if (!r) throw std::runtime_error(r.error().message);
  return std::move(*r);
}

}  // namespace kvtier::bench::kvsim
