#pragma once
// Work that yields the CPU to everything else for a bounded time ([daemon]
// promote_yield): the calling thread runs at SCHED_IDLE, so it gets a CPU only
// when no other task wants one (an idle CPU, or the workload between its
// passes), until the bound passes; then a watcher thread puts it back to
// SCHED_OTHER at its own nice value and it competes as before. Where a CPU is
// free the work runs at once; where the workload keeps every CPU busy it waits
// at most the bound. Needs CAP_SYS_NICE (or an RLIMIT_NICE that allows the
// thread's nice value) to go back to SCHED_OTHER: create() checks that once.

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

#include "policy/error.hpp"

namespace kvtier::agent {

class IdleYield {
 public:
  // The watcher thread; an error when the calling thread cannot leave
  // SCHED_IDLE again (checked by entering and leaving it once).
  static Result<std::unique_ptr<IdleYield>> create(std::chrono::milliseconds bound);
  ~IdleYield();
  IdleYield(const IdleYield&) = delete;
  IdleYield& operator=(const IdleYield&) = delete;

  // Runs `work` on the calling thread at SCHED_IDLE for at most the bound from
  // now, the rest at SCHED_OTHER. Returns false if the thread could not be put
  // back (logged; the caller should stop using this).
  bool run(const std::function<void()>& work);

  // How many runs the watcher had to end (the bound passed before the work
  // did), and the runs in all.
  [[nodiscard]] std::uint64_t bounded() const { return bounded_.load(); }
  [[nodiscard]] std::uint64_t runs() const { return runs_.load(); }

 private:
  explicit IdleYield(std::chrono::milliseconds bound) : bound_(bound) {}
  void watch(const std::stop_token& st);

  std::chrono::milliseconds bound_;
  std::mutex mu_;
  std::condition_variable_any cv_;
  pid_t tid_ = 0;
  bool armed_ = false;
  bool restore_failed_ = false;
  std::chrono::steady_clock::time_point deadline_;
  std::atomic<std::uint64_t> bounded_ = 0;  // read by status without the lock
  std::atomic<std::uint64_t> runs_ = 0;
  std::jthread watcher_;
};

}  // namespace kvtier::agent
