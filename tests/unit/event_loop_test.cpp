#include "agent/daemon/event_loop.hpp"

#include <gtest/gtest.h>
#include <sys/epoll.h>
#include <unistd.h>

#include <csignal>

namespace kvtier::agent {
namespace {

using namespace std::chrono_literals;

// Pumps the loop until `done` or about two seconds pass.
template <class F>
void pump(EventLoop& loop, F done) {
  for (int i = 0; i < 200 && !done(); ++i) ASSERT_TRUE(loop.run_once(10ms));
}

TEST(EventLoop, PeriodicTimerFiresRepeatedly) {
  auto loop = EventLoop::create();
  ASSERT_TRUE(loop);
  int fired = 0;
  ASSERT_TRUE((*loop)->add_timer(1ms, 5ms, [&] { ++fired; }));
  pump(**loop, [&] { return fired >= 3; });
  EXPECT_GE(fired, 3);
}

TEST(EventLoop, OneShotTimerFiresOnce) {
  auto loop = EventLoop::create();
  ASSERT_TRUE(loop);
  int fired = 0;
  ASSERT_TRUE((*loop)->add_timer(1ms, 0ms, [&] { ++fired; }));
  pump(**loop, [&] { return fired >= 1; });
  for (int i = 0; i < 5; ++i) ASSERT_TRUE((*loop)->run_once(5ms));
  EXPECT_EQ(fired, 1);
}

TEST(EventLoop, FdHandlerMayRemoveItself) {
  auto loop = EventLoop::create();
  ASSERT_TRUE(loop);
  int p[2];
  ASSERT_EQ(pipe(p), 0);
  int calls = 0;
  ASSERT_TRUE((*loop)->add_fd(p[0], EPOLLIN, [&](std::uint32_t) {
    ++calls;
    (*loop)->remove_fd(p[0]);
  }));
  ASSERT_EQ(write(p[1], "x", 1), 1);
  pump(**loop, [&] { return calls > 0; });
  ASSERT_EQ(write(p[1], "y", 1), 1);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE((*loop)->run_once(5ms));
  EXPECT_EQ(calls, 1);
  // One registration per fd: a second add is an error, not a silent replacement.
  ASSERT_TRUE((*loop)->add_fd(p[1], EPOLLOUT, [](std::uint32_t) {}));
  EXPECT_FALSE((*loop)->add_fd(p[1], EPOLLOUT, [](std::uint32_t) {}));
  (*loop)->remove_fd(p[1]);
  close(p[0]);
  close(p[1]);
}

TEST(EventLoop, SignalsArriveAsEvents) {
  auto loop = EventLoop::create();
  ASSERT_TRUE(loop);
  int got = 0;
  ASSERT_TRUE((*loop)->handle_signals({SIGUSR1}, [&](int s) {
    got = s;
    (*loop)->stop();
  }));
  ASSERT_EQ(kill(getpid(), SIGUSR1), 0);
  ASSERT_TRUE((*loop)->run());
  EXPECT_EQ(got, SIGUSR1);
  EXPECT_TRUE((*loop)->stopped());
}

TEST(EventLoop, RearmChangesTheInterval) {
  auto loop = EventLoop::create();
  ASSERT_TRUE(loop);
  int fired = 0;
  auto id = (*loop)->add_timer(1h, 1h, [&] { ++fired; });
  ASSERT_TRUE(id);
  ASSERT_TRUE((*loop)->rearm_timer(*id, 1ms, 2ms));
  pump(**loop, [&] { return fired >= 2; });
  EXPECT_GE(fired, 2);
  (*loop)->remove_timer(*id);
  EXPECT_FALSE((*loop)->rearm_timer(*id, 1ms, 1ms));
}

}  // namespace
}  // namespace kvtier::agent
