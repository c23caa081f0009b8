#include "agent/daemon/event_loop.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <sys/epoll.h>
#include <sys/signalfd.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstddef>
#include <cstdint>
#include <ctime>
#include <memory>
#include <utility>
#include <vector>

#include "policy/error.hpp"

namespace kvtier::agent {
namespace {

timespec to_timespec(std::chrono::nanoseconds ns) {
  const auto count = ns.count();
  return timespec{.tv_sec = static_cast<time_t>(count / 1'000'000'000),
                  .tv_nsec = static_cast<long>(count % 1'000'000'000)};
}

Result<void> arm(int fd, std::chrono::nanoseconds first, std::chrono::nanoseconds interval) {
  // A zero it_value disarms a timerfd; "now" is the nearest thing to zero.
  if (first.count() <= 0) first = std::chrono::nanoseconds(1);
  itimerspec spec{.it_interval = to_timespec(interval), .it_value = to_timespec(first)};
  if (timerfd_settime(fd, 0, &spec, nullptr) != 0) {
    const int err = errno;
    return fail(fmt::format("timerfd_settime: {}", errno_text(err)), err);
  }
  return {};
}

}  // namespace

Result<std::unique_ptr<EventLoop>> EventLoop::create() {
  const int fd = epoll_create1(EPOLL_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    return fail(fmt::format("epoll_create1: {}", errno_text(err)), err);
  }
  return std::unique_ptr<EventLoop>(new EventLoop(fd));
}

EventLoop::~EventLoop() {
  for (const int t : timers_) close(t);
  if (sigfd_ >= 0) {
    close(sigfd_);
    // Hand the signals back: whoever runs next (a test, a second loop) expects defaults.
    sigset_t set;
    sigemptyset(&set);
    for (const int s : blocked_signals_) sigaddset(&set, s);
    pthread_sigmask(SIG_UNBLOCK, &set, nullptr);
  }
  close(epfd_);
}

Result<void> EventLoop::add_fd(int fd, std::uint32_t events, FdHandler handler) {
  if (token_of_fd_.contains(fd)) return fail(fmt::format("fd {} is already watched", fd));
  const std::uint64_t token = next_token_++;
  epoll_event ev{.events = events, .data = {.u64 = token}};
  if (epoll_ctl(epfd_, EPOLL_CTL_ADD, fd, &ev) != 0) {
    const int err = errno;
    return fail(fmt::format("epoll_ctl(ADD, fd {}): {}", fd, errno_text(err)), err);
  }
  entries_[token] = Entry{.fd = fd, .handler = std::make_shared<FdHandler>(std::move(handler))};
  token_of_fd_[fd] = token;
  return {};
}

Result<void> EventLoop::modify_fd(int fd, std::uint32_t events) {
  auto it = token_of_fd_.find(fd);
  if (it == token_of_fd_.end()) return fail(fmt::format("fd {} is not watched", fd));
  epoll_event ev{.events = events, .data = {.u64 = it->second}};
  if (epoll_ctl(epfd_, EPOLL_CTL_MOD, fd, &ev) != 0) {
    const int err = errno;
    return fail(fmt::format("epoll_ctl(MOD, fd {}): {}", fd, errno_text(err)), err);
  }
  return {};
}

void EventLoop::remove_fd(int fd) {
  auto it = token_of_fd_.find(fd);
  if (it == token_of_fd_.end()) return;
  epoll_ctl(epfd_, EPOLL_CTL_DEL, fd, nullptr);
  entries_.erase(it->second);
  token_of_fd_.erase(it);
}

Result<EventLoop::TimerId> EventLoop::add_timer(std::chrono::nanoseconds first,
                                                std::chrono::nanoseconds interval,
                                                TimerHandler handler) {
  const int fd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    return fail(fmt::format("timerfd_create: {}", errno_text(err)), err);
  }
  auto added = add_fd(fd, EPOLLIN, [fd, h = std::move(handler)](std::uint32_t) {
    std::uint64_t expirations = 0;
    if (read(fd, &expirations, sizeof expirations) != sizeof expirations) return;
    h();
  });
  if (!added) {
    close(fd);
    return std::unexpected(added.error());
  }
  if (auto armed = arm(fd, first, interval); !armed) {
    remove_fd(fd);
    close(fd);
    return std::unexpected(armed.error());
  }
  timers_.push_back(fd);
  return fd;
}

Result<void> EventLoop::rearm_timer(TimerId id, std::chrono::nanoseconds first,
                                    std::chrono::nanoseconds interval) {
  if (std::find(timers_.begin(), timers_.end(), id) == timers_.end()) {
    return fail(fmt::format("no timer {}", id));
  }
  return arm(id, first, interval);
}

void EventLoop::remove_timer(TimerId id) {
  auto it = std::find(timers_.begin(), timers_.end(), id);
  if (it == timers_.end()) return;
  remove_fd(id);
  close(id);
  timers_.erase(it);
}

Result<void> EventLoop::handle_signals(const std::vector<int>& signals, SignalHandler handler) {
  if (sigfd_ >= 0) return fail("signals are already handled by this loop");
  sigset_t set;
  sigemptyset(&set);
  for (const int s : signals) sigaddset(&set, s);
  if (const int rc = pthread_sigmask(SIG_BLOCK, &set, nullptr); rc != 0) {
    return fail(fmt::format("pthread_sigmask: {}", errno_text(rc)), rc);
  }
  blocked_signals_ = signals;
  const int fd = signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    return fail(fmt::format("signalfd: {}", errno_text(err)), err);
  }
  sigfd_ = fd;
  return add_fd(fd, EPOLLIN, [fd, h = std::move(handler)](std::uint32_t) {
    signalfd_siginfo info{};
    while (read(fd, &info, sizeof info) == static_cast<ssize_t>(sizeof info)) {
      h(static_cast<int>(info.ssi_signo));
    }
  });
}

Result<int> EventLoop::run_once(std::chrono::milliseconds timeout) {
  std::array<epoll_event, 32> events{};
  const int n = epoll_wait(epfd_, events.data(), static_cast<int>(events.size()),
                           static_cast<int>(timeout.count()));
  if (n < 0) {
    const int err = errno;
    if (err == EINTR) return 0;
    return fail(fmt::format("epoll_wait: {}", errno_text(err)), err);
  }
  int handled = 0;
  for (int i = 0; i < n; ++i) {
    auto it = entries_.find(events[static_cast<std::size_t>(i)].data.u64);
    if (it == entries_.end()) continue;  // removed by an earlier handler in this batch
    // Keep the handler alive even if it removes itself.
    const auto handler = it->second.handler;
    (*handler)(events[static_cast<std::size_t>(i)].events);
    ++handled;
  }
  return handled;
}

Result<void> EventLoop::run() {
  while (!stop_) {
    if (auto r = run_once(std::chrono::milliseconds(-1)); !r) return std::unexpected(r.error());
  }
  return {};
}

}  // namespace kvtier::agent
