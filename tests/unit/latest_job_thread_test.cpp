#include "agent/sources/latest_job_thread.hpp"

#include <gtest/gtest.h>

#include <future>
#include <mutex>
#include <stdexcept>
#include <vector>

namespace kvtier {
namespace {

using agent::LatestJobThread;

// A job that tells the test it runs, then waits for the test to let it end.
struct Gate {
  std::promise<void> started;
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
};

TEST(LatestJobThread, PostNeverWaitsAndTheNewestWaitingJobReplacesTheOthers) {
  std::mutex mu;
  std::vector<int> ran;
  const auto note = [&](int job) {
    const std::scoped_lock lock(mu);
    ran.push_back(job);
  };
  Gate gate;
  LatestJobThread t("kvtier-test");
  EXPECT_TRUE(t.idle());
  t.post([&] {
    gate.started.set_value();
    gate.released.wait();
    note(1);
  });
  gate.started.get_future().wait();
  // Job 1 runs until the test releases it: these return at once, 3 replaces 2.
  t.post([&] { note(2); });
  t.post([&] { note(3); });
  EXPECT_FALSE(t.idle());
  EXPECT_EQ(t.replaced(), 1U);
  gate.release.set_value();
  t.wait_idle();
  EXPECT_TRUE(t.idle());
  EXPECT_EQ(ran, (std::vector<int>{1, 3}));
  EXPECT_EQ(t.ran(), 2U);
}

TEST(LatestJobThread, DropWaitingKeepsTheRunningJob) {
  std::vector<int> ran;
  Gate gate;
  LatestJobThread t("kvtier-test");
  t.post([&] {
    gate.started.set_value();
    gate.released.wait();
    ran.push_back(1);
  });
  gate.started.get_future().wait();
  t.post([&] { ran.push_back(2); });
  t.drop_waiting();
  gate.release.set_value();
  t.wait_idle();
  EXPECT_EQ(ran, (std::vector<int>{1}));
  EXPECT_EQ(t.ran(), 1U);
  EXPECT_EQ(t.replaced(), 1U);
}

TEST(LatestJobThread, AJobThatThrowsLeavesTheThreadRunning) {
  LatestJobThread t("kvtier-test");
  t.post([] { throw std::runtime_error("job failed"); });
  t.wait_idle();
  bool second = false;
  t.post([&] { second = true; });
  t.wait_idle();
  EXPECT_TRUE(second);
  EXPECT_EQ(t.ran(), 2U);
}

}  // namespace
}  // namespace kvtier
