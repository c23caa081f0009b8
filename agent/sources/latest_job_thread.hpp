#pragma once
// One background thread that runs the newest job given to it. A job posted
// while another runs waits; a job posted while one waits replaces it (the
// dropped one is counted), so a slow job never piles up work behind it and
// the caller of post() never waits for a job. The DAMON source commits new
// ranges to its kdamond this way: the kernel's sysfs "commit" returns only
// once the kdamond applied it, which can take an aggregation interval
// (seconds), and the control loop must not wait for that.

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <utility>

namespace kvtier::agent {

class LatestJobThread {
 public:
  // `name`: the thread's name (15 characters at most are kept), for ps and gdb.
  explicit LatestJobThread(std::string name) : name_(std::move(name)) {}
  // Drops the waiting job, waits for the running one to end, joins.
  ~LatestJobThread();
  LatestJobThread(const LatestJobThread&) = delete;
  LatestJobThread& operator=(const LatestJobThread&) = delete;

  // Queues `job` in place of the one waiting, if any; starts the thread the first time.
  void post(std::function<void()> job);
  // Drops the waiting job (not the running one).
  void drop_waiting();
  // Blocks until no job runs or waits. Only where waiting is right: at stop, in tests.
  void wait_idle();
  [[nodiscard]] bool idle() const;
  // Jobs run to their end, and jobs replaced (or dropped) before they started.
  [[nodiscard]] std::uint64_t ran() const;
  [[nodiscard]] std::uint64_t replaced() const;

 private:
  void run();

  std::string name_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::function<void()> waiting_;
  bool running_ = false;
  bool quit_ = false;
  std::uint64_t ran_ = 0;
  std::uint64_t replaced_ = 0;
  std::thread thread_;
};

}  // namespace kvtier::agent
