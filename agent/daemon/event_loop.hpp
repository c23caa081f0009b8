#pragma once
// The daemon's single-threaded event loop: epoll over file descriptors, timers
// as timerfds and signals as a signalfd, so the control loop, the control
// socket, the watchdog and SIGHUP/SIGTERM are all handled on one thread, one
// event at a time, with no signal-handler races.

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <vector>

#include "policy/error.hpp"

namespace kvtier::agent {

class EventLoop {
 public:
  using FdHandler = std::function<void(std::uint32_t events)>;
  using TimerHandler = std::function<void()>;
  using SignalHandler = std::function<void(int signo)>;
  using TimerId = int;

  static Result<std::unique_ptr<EventLoop>> create();
  ~EventLoop();
  EventLoop(const EventLoop&) = delete;
  EventLoop& operator=(const EventLoop&) = delete;

  // Watches `fd` (not owned) for epoll `events`. A handler may add or remove any
  // fd, its own included, while it runs.
  Result<void> add_fd(int fd, std::uint32_t events, FdHandler handler);
  Result<void> modify_fd(int fd, std::uint32_t events);
  void remove_fd(int fd);

  // A CLOCK_MONOTONIC timer firing first after `first`, then every `interval`
  // (zero: once). Expirations missed while the loop was busy are coalesced into
  // one call: the control loop must not run back to back to catch up.
  Result<TimerId> add_timer(std::chrono::nanoseconds first, std::chrono::nanoseconds interval,
                            TimerHandler handler);
  Result<void> rearm_timer(TimerId id, std::chrono::nanoseconds first,
                           std::chrono::nanoseconds interval);
  void remove_timer(TimerId id);

  // Blocks `signals` in the calling thread and delivers them here. Call it
  // before any other thread starts (threads inherit the mask; an unblocked
  // thread would take SIGTERM's default action and kill the process). Call once.
  Result<void> handle_signals(const std::vector<int>& signals, SignalHandler handler);

  // Dispatches events until stop(). An epoll failure other than EINTR ends it
  // with an error.
  Result<void> run();
  // Waits up to `timeout` (negative: forever) and dispatches what is ready;
  // returns how many events were handled.
  Result<int> run_once(std::chrono::milliseconds timeout);
  void stop() { stop_ = true; }
  [[nodiscard]] bool stopped() const { return stop_; }

 private:
  struct Entry {
    int fd = -1;
    std::shared_ptr<FdHandler> handler;
  };
  explicit EventLoop(int epfd) : epfd_(epfd) {}

  int epfd_ = -1;
  int sigfd_ = -1;
  std::vector<int> blocked_signals_;
  std::uint64_t next_token_ = 1;
  // Tokens, not fds, identify registrations in epoll_event.data, so an event
  // for an fd removed (and its number reused) during the same batch is dropped.
  std::map<std::uint64_t, Entry> entries_;
  std::map<int, std::uint64_t> token_of_fd_;
  std::vector<int> timers_;
  bool stop_ = false;
};

}  // namespace kvtier::agent
