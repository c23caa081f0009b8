#include "agent/daemon/idle_yield.hpp"

#include <fmt/format.h>
#include <sched.h>
#include <spdlog/spdlog.h>
#include <sys/types.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <stop_token>
#include <thread>

#include "policy/error.hpp"

namespace kvtier::agent {
namespace {

// SCHED_IDLE or SCHED_OTHER for one thread; the legacy call keeps its nice value.
int set_policy(pid_t tid, int policy) {
  const sched_param p{};
  return sched_setscheduler(tid, policy, &p) == 0 ? 0 : errno;
}

}  // namespace

Result<std::unique_ptr<IdleYield>> IdleYield::create(std::chrono::milliseconds bound) {
  const pid_t tid = gettid();
  if (const int e = set_policy(tid, SCHED_IDLE); e != 0) {
    return fail(fmt::format("promote_yield: cannot run the promotion tick at SCHED_IDLE: {}",
                            errno_text(e)));
  }
  if (const int e = set_policy(tid, SCHED_OTHER); e != 0) {
    // Stuck at SCHED_IDLE would starve every step on a busy host.
    return fail(fmt::format(
        "promote_yield: kvtierd cannot leave SCHED_IDLE again ({}); give it CAP_SYS_NICE or set "
        "promote_yield = \"off\" — it is running at SCHED_IDLE now",
        errno_text(e)));
  }
  std::unique_ptr<IdleYield> y(new IdleYield(bound));
  y->watcher_ = std::jthread([p = y.get()](const std::stop_token& st) { p->watch(st); });
  return y;
}

IdleYield::~IdleYield() {
  watcher_.request_stop();
  cv_.notify_all();
}

bool IdleYield::run(const std::function<void()>& work) {
  const pid_t tid = gettid();
  {
    const std::scoped_lock lock(mu_);
    tid_ = tid;
    armed_ = true;
    deadline_ = std::chrono::steady_clock::now() + bound_;
    ++runs_;
  }
  cv_.notify_all();
  const bool idle = set_policy(tid, SCHED_IDLE) == 0;
  if (idle) sched_yield();  // let whatever else wants this CPU have it now
  work();
  // Back to SCHED_OTHER before taking the lock: at SCHED_IDLE, holding it could keep the
  // watcher waiting for as long as the workload keeps the CPU. The watcher may have done
  // it already; doing it twice is harmless.
  const int e = idle ? set_policy(tid, SCHED_OTHER) : 0;
  {
    const std::scoped_lock lock(mu_);
    armed_ = false;
  }
  cv_.notify_all();
  if (e != 0) {
    spdlog::error("promote_yield: cannot leave SCHED_IDLE: {}", errno_text(e));
    return false;
  }
  const std::scoped_lock lock(mu_);
  return !restore_failed_;
}

// Puts the armed thread back to SCHED_OTHER when its deadline passes first.
void IdleYield::watch(const std::stop_token& st) {
  std::unique_lock lock(mu_);
  while (!st.stop_requested()) {
    if (!armed_) {
      cv_.wait(lock, st, [this] { return armed_; });
      continue;
    }
    const auto deadline = deadline_;
    if (cv_.wait_until(lock, st, deadline,
                       [this, deadline] { return !armed_ || deadline_ != deadline; })) {
      continue;  // the work ended (or a new run began) first
    }
    if (st.stop_requested()) return;
    armed_ = false;
    ++bounded_;
    if (const int e = set_policy(tid_, SCHED_OTHER); e != 0) {
      restore_failed_ = true;
      spdlog::error("promote_yield: cannot put the loop back to SCHED_OTHER: {}", errno_text(e));
    }
  }
}

}  // namespace kvtier::agent
