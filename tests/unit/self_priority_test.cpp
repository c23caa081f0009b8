// kvtierd's own CPU priority: [daemon] nice reaches every thread it has, and the
// threads it starts later. Run in a child process (a death test forks), so the
// test binary keeps its own priority.

#include "agent/host/self_priority.hpp"

#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <condition_variable>
#include <fstream>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>

namespace kvtier::agent {
namespace {

// Field 19 of /proc/self/task/TID/stat: the thread's nice value as the kernel has it.
int thread_nice(long tid) {
  std::ifstream f("/proc/self/task/" + std::to_string(tid) + "/stat");
  std::string stat((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  std::istringstream rest(stat.substr(stat.rfind(')') + 2));
  std::string field;
  for (int i = 3; i <= 19; ++i) rest >> field;
  return std::stoi(field);
}

long this_tid() {
  return syscall(SYS_gettid);
}

// A thread started before the call (as the logger's may be) and one started after it.
int set_and_check(int target) {
  std::mutex m;
  std::condition_variable cv;
  bool go = false;
  long early_tid = 0;
  std::thread early([&] {
    std::unique_lock lock(m);
    early_tid = this_tid();
    cv.notify_all();
    cv.wait(lock, [&] { return go; });
  });
  {
    std::unique_lock lock(m);
    cv.wait(lock, [&] { return early_tid != 0; });
  }
  const bool ok = set_own_nice(target).has_value();
  int late_nice = -100;
  std::thread late([&] { late_nice = thread_nice(this_tid()); });
  late.join();
  const bool all = ok && own_nice() == target && thread_nice(this_tid()) == target &&
                   thread_nice(early_tid) == target && late_nice == target;
  {
    std::lock_guard lock(m);
    go = true;
  }
  cv.notify_all();
  early.join();
  return all ? 0 : 1;
}

TEST(SelfPriority, EveryThreadGetsTheNiceValue) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  // Raising the nice value needs no privilege.
  const int target = own_nice() < 19 ? own_nice() + 1 : 19;
  EXPECT_EXIT(_exit(set_and_check(target)), testing::ExitedWithCode(0), "");
}

TEST(SelfPriority, ARefusalNamesTheErrno) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  // Lowering it needs CAP_SYS_NICE: as root it is allowed, so only an unprivileged run sees
  // the refusal; a root run checks that the lower value is set.
  EXPECT_EXIT(
      {
        if (setpriority(PRIO_PROCESS, 0, 19) != 0) _exit(2);
        auto r = set_own_nice(18);
        if (geteuid() == 0) _exit(r && own_nice() == 18 ? 0 : 1);
        _exit(!r && r.error().message.find("CAP_SYS_NICE") != std::string::npos ? 0 : 1);
      },
      testing::ExitedWithCode(0), "");
}

}  // namespace
}  // namespace kvtier::agent
