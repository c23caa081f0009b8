// Privileged tests of the BPF hotness sources on the running kernel (root).

#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <chrono>
#include <functional>
#include <future>
#include <map>
#include <set>
#include <string>
#include <thread>

#include "agent/sources/damon_source.hpp"
#include "agent/sources/fault_sampler.hpp"
#include "agent/sources/migration_counter.hpp"
#include "agent/sources/pmu_sampler.hpp"
#include "agent/sources/process_watcher.hpp"
#include "agent/sources/return_watch.hpp"
#include "fixture.hpp"
#include "privileged/toucher.hpp"

extern char** environ;

namespace kvtier {
namespace {

using agent::HostPaths;
using agent::SourceBatch;
using testing::Toucher;

#define REQUIRE_ROOT() \
  if (geteuid() != 0) GTEST_SKIP() << "needs root (loads BPF programs on the kernel)"

TimeNs now_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<TimeNs>(ts.tv_sec) * 1'000'000'000ULL + static_cast<TimeNs>(ts.tv_nsec);
}

// Every page the source reported for `pid`, with its summed weight; and
// whether any other pid showed up.
struct Seen {
  std::map<std::uint64_t, std::uint64_t> pages;
  std::set<Pid> other_pids;
};
Seen split(const SourceBatch& b, Pid pid) {
  Seen s;
  for (const auto& x : b.samples) {
    if (x.pid == pid) {
      s.pages[x.addr] += x.weight;
    } else {
      s.other_pids.insert(x.pid);
    }
  }
  return s;
}

void expect_exactly_touched(agent::HotnessSource& src, SourceKind kind) {
  Toucher child(1000, 2);
  ASSERT_TRUE(child.ready());
  const Pid pid = child.pid();
  ASSERT_TRUE(src.set_targets(std::span<const Pid>(&pid, 1)));
  SourceBatch before;
  ASSERT_TRUE(src.collect(now_ns(), before));  // anything from before the touch
  const TimeNs t0 = now_ns();
  ASSERT_TRUE(child.touch());
  SourceBatch batch;
  auto ok = src.collect(now_ns(), batch);
  ASSERT_TRUE(ok) << ok.error().message;
  const Seen seen = split(batch, pid);
  EXPECT_TRUE(seen.other_pids.empty())
      << "samples from " << seen.other_pids.size() << " other processes";
  std::set<std::uint64_t> got;
  for (const auto& [addr, weight] : seen.pages) {
    got.insert(addr);
    EXPECT_EQ(weight, 1U) << std::hex << addr;
  }
  EXPECT_EQ(got.size(), child.touched_pages().size());
  EXPECT_EQ(got, child.touched_pages());
  for (const auto& x : batch.samples) {
    EXPECT_EQ(x.source, kind);
    EXPECT_GE(x.time, t0);
  }
  // Touching again faults no more: the pages are present now.
  ASSERT_TRUE(child.touch());
  SourceBatch again;
  ASSERT_TRUE(src.collect(now_ns(), again));
  EXPECT_TRUE(split(again, pid).pages.empty());
}

TEST(PmuSampler, SoftwarePageFaultsReportExactlyTheTouchedPages) {
  REQUIRE_ROOT();
  agent::PmuSampler s(HostPaths{}, agent::PmuOptions{.events = agent::PmuEventChoice::kSoftware,
                                                     .sample_period = 1,
                                                     .adaptive = false});
  const auto a = s.probe();
  ASSERT_TRUE(a.ok) << a.why;
  auto ok = s.start();
  ASSERT_TRUE(ok) << ok.error().message;
  ASSERT_TRUE(s.event().has_value());
  EXPECT_EQ(s.event()->kind, agent::PmuEventKind::kSoftwarePageFaults);
  expect_exactly_touched(s, SourceKind::kPmuSoft);
  auto st = s.stats();
  ASSERT_TRUE(st);
  EXPECT_GE(st->matched, 500U);
  EXPECT_GE(st->events, st->matched);
}

TEST(FaultSampler, PageFaultTracepointReportsExactlyTheTouchedPages) {
  REQUIRE_ROOT();
  agent::FaultSampler s(HostPaths{}, agent::FaultOptions{});
  const auto a = s.probe();
  ASSERT_TRUE(a.ok) << a.why;
  auto ok = s.start();
  ASSERT_TRUE(ok) << ok.error().message;
  expect_exactly_touched(s, SourceKind::kFault);
}

TEST(FaultSampler, PagesOfARemovedTargetAreDeleted) {
  REQUIRE_ROOT();
  agent::FaultSampler s(HostPaths{}, agent::FaultOptions{});
  ASSERT_TRUE(s.start());
  Toucher a(200, 1);
  Toucher b(100, 1);
  ASSERT_TRUE(a.ready() && b.ready());
  const std::vector<Pid> both = {a.pid(), b.pid()};
  ASSERT_TRUE(s.set_targets(both));
  ASSERT_TRUE(a.touch());
  ASSERT_TRUE(b.touch());
  const Pid gone = a.pid();
  a.finish();
  // The daemon drops an exited target; its entries must go with it.
  const std::vector<Pid> left = {b.pid()};
  ASSERT_TRUE(s.set_targets(left));
  SourceBatch batch;
  ASSERT_TRUE(s.collect(now_ns(), batch));
  EXPECT_TRUE(split(batch, gone).pages.empty());
  EXPECT_EQ(split(batch, b.pid()).pages.size(), 100U);
}

// The return watch: the first fault in an armed chunk is reported once, and its
// fd turns readable until the reports are taken; a disarmed chunk, and a chunk
// of a process that left the target set, are not reported. The pages
// themselves come through the page map, exactly as without the watch.
TEST(FaultSampler, ReturnWatchReportsEachArmedChunkOnceAndWakesItsFd) {
  REQUIRE_ROOT();
  agent::FaultSampler s(HostPaths{}, agent::FaultOptions{});
  ASSERT_TRUE(s.start());
  agent::ReturnWatch* w = s.return_watch();
  ASSERT_NE(w, nullptr);
  const auto readable = [&] {
    pollfd p{.fd = w->epoll_fd(), .events = POLLIN, .revents = 0};
    return poll(&p, 1, 0) == 1 && (p.revents & POLLIN) != 0;
  };
  const std::uint64_t chunk = agent::ReturnWatch::chunk_bytes();
  ASSERT_EQ(chunk, 64U << 10);
  Toucher child(256, 4);  // 1 MiB, every 4th page touched
  ASSERT_TRUE(child.ready());
  const Pid pid = child.pid();
  ASSERT_TRUE(s.set_targets(std::span<const Pid>(&pid, 1)));
  SourceBatch before;
  ASSERT_TRUE(s.collect(now_ns(), before));
  EXPECT_FALSE(readable());
  // Arm the first half of the buffer, then disarm its first chunk again.
  const std::uint64_t mid = child.begin() + (child.end() - child.begin()) / 2;
  const std::vector<AddrRange> half = {{child.begin(), mid}};
  w->arm(pid, half);
  const std::uint64_t first_chunk = child.begin() / chunk;
  const std::vector<AddrRange> head = {{first_chunk * chunk, first_chunk * chunk + 1}};
  w->disarm(pid, head);
  EXPECT_EQ(w->stats().disarmed, 1U);
  // Chunks armed and touched: arm() takes every chunk the half overlaps, so the
  // chunk holding mid - 1 is armed whole, and a touch past mid in it counts too
  // (whatever the buffer's alignment to a chunk).
  std::set<std::uint64_t> expected;
  for (const std::uint64_t page : child.touched_pages()) {
    if (page / chunk <= (mid - 1) / chunk && page / chunk != first_chunk) {
      expected.insert(page / chunk);
    }
  }
  ASSERT_FALSE(expected.empty());
  ASSERT_TRUE(child.touch());
  EXPECT_TRUE(readable()) << "the first touch of an armed chunk wakes the loop";
  SourceBatch batch;
  ASSERT_TRUE(s.collect(now_ns(), batch));
  EXPECT_FALSE(readable()) << "collect() took the reports";
  EXPECT_EQ(w->stats().returns, expected.size());
  EXPECT_EQ(w->stats().failed, 0U);
  auto st = s.stats();
  ASSERT_TRUE(st);
  EXPECT_EQ(st->returns, expected.size());
  EXPECT_EQ(st->return_lost, 0U);
  std::set<std::uint64_t> got;
  for (const auto& [addr, weight] : split(batch, pid).pages) got.insert(addr);
  EXPECT_EQ(got, child.touched_pages()) << "the evidence is the touched pages, no more";
  // A second target armed whole, then out of the set and back: its chunks went
  // with it, so its first touches wake nothing.
  Toucher other(64, 1);
  ASSERT_TRUE(other.ready());
  const std::vector<Pid> both = {pid, other.pid()};
  ASSERT_TRUE(s.set_targets(both));
  const std::vector<AddrRange> all = {{other.begin(), other.end()}};
  w->arm(other.pid(), all);
  ASSERT_TRUE(s.set_targets(std::span<const Pid>(&pid, 1)));
  ASSERT_TRUE(s.set_targets(both));
  ASSERT_TRUE(other.touch());
  EXPECT_FALSE(readable());
  SourceBatch after;
  ASSERT_TRUE(s.collect(now_ns(), after));
  EXPECT_EQ(split(after, other.pid()).pages.size(), 64U);
  EXPECT_EQ(w->stats().returns, expected.size());
}

TEST(ProcessWatcher, SeesForkExecAndExitOfAChild) {
  REQUIRE_ROOT();
  agent::ProcessWatcher w(HostPaths{});
  const auto a = w.probe();
  ASSERT_TRUE(a.ok) << a.why;
  auto ok = w.start();
  ASSERT_TRUE(ok) << ok.error().message;
  pid_t child = 0;
  char arg0[] = "false";
  char* argv[] = {arg0, nullptr};
  ASSERT_EQ(posix_spawn(&child, "/bin/false", nullptr, nullptr, argv, environ), 0);
  int status = 0;
  waitpid(child, &status, 0);
  bool fork_seen = false;
  bool exec_seen = false;
  bool exit_seen = false;
  std::vector<agent::ProcEvent> events;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (!exit_seen && std::chrono::steady_clock::now() < deadline) {
    events.clear();
    ASSERT_TRUE(w.poll(100, events));
    for (const auto& e : events) {
      if (e.pid != child) continue;
      if (e.kind == agent::ProcEventKind::kFork) {
        fork_seen = true;
        EXPECT_EQ(e.ppid, getpid());
      }
      if (e.kind == agent::ProcEventKind::kExec) {
        exec_seen = true;
        EXPECT_EQ(e.comm, "false");
      }
      if (e.kind == agent::ProcEventKind::kExit) {
        exit_seen = true;
        EXPECT_EQ(e.comm, "false");
        EXPECT_EQ(e.exit_code, 1U << 8) << "exit status 1";
      }
    }
  }
  EXPECT_TRUE(fork_seen);
  EXPECT_TRUE(exec_seen);
  EXPECT_TRUE(exit_seen);
  auto dropped = w.dropped();
  ASSERT_TRUE(dropped);
  EXPECT_EQ(*dropped, 0U);
}

TEST(ProcessWatcher, ThreadsAreNotProcesses) {
  REQUIRE_ROOT();
  agent::ProcessWatcher w(HostPaths{});
  ASSERT_TRUE(w.start());
  std::thread t([] {});
  t.join();
  std::vector<agent::ProcEvent> events;
  ASSERT_TRUE(w.poll(200, events));
  for (const auto& e : events) {
    EXPECT_FALSE(e.pid == getpid()) << to_string(e.kind) << " event for a thread of this test";
  }
}

TEST(MigrationCounter, LoadsAndCountsCompactionMigrations) {
  REQUIRE_ROOT();
  agent::MigrationCounter m(HostPaths{});
  const auto a = m.probe();
  ASSERT_TRUE(a.ok) << a.why;
  auto ok = m.start();
  ASSERT_TRUE(ok) << ok.error().message;
  auto before = m.read();
  ASSERT_TRUE(before);
  // Compaction migrates movable pages on any machine, one node or many.
  {
    Toucher frag(4096, 2);  // every other page: leaves holes to compact
    ASSERT_TRUE(frag.ready());
    ASSERT_TRUE(frag.touch());
    FILE* f = fopen("/proc/sys/vm/compact_memory", "w");
    ASSERT_NE(f, nullptr);
    fputs("1", f);
    fclose(f);
  }
  auto after = m.read();
  ASSERT_TRUE(after);
  const auto& c = after->by_reason.at(0);  // KVT_MR_COMPACTION
  if (c.calls == before->by_reason.at(0).calls) {
    GTEST_SKIP() << "compaction found nothing to migrate on this host";
  }
  const auto& b = before->by_reason.at(0);
  EXPECT_GT(c.succeeded + c.failed, b.succeeded + b.failed) << "calls without pages";
  EXPECT_GE(after->total().calls - before->total().calls, c.calls - b.calls);
}

TEST(DamonSource, ProgramLoadsAndAttaches) {
  REQUIRE_ROOT();
  agent::DamonSource d(HostPaths{}, agent::DamonOptions{});
  // The reader attaches wherever the tracepoint exists, even where DAMON
  // cannot monitor virtual addresses (the kdamond is only started with targets).
  auto ok = d.start();
  ASSERT_TRUE(ok) << ok.error().message;
  EXPECT_EQ(d.program_fds().size(), 1U);
  SourceBatch b;
  ASSERT_TRUE(d.collect(now_ns(), b));
  EXPECT_TRUE(b.regions.empty());
  d.stop();
}

// The kernel's "commit" returns once the kdamond applied the new ranges (at
// its next aggregation on 6.12: many seconds with a long cold_age), and the
// control loop calls set_ranges(). Here the kdamond is a fixture tree whose
// `state` becomes a FIFO nobody reads: a write to it waits like a commit
// does, until the test reads it. set_ranges() must return all the same, and
// the updates that come meanwhile end in one commit of the newest ranges.
TEST(DamonSource, CommitsNewRangesWithoutWaitingForTheKdamond) {
  REQUIRE_ROOT();
  using namespace std::chrono_literals;
  testing::Fixture t({testing::dir("proc"), testing::dir("sys")});
  t.copy("sources/damon-vaddr");
  const std::string kd = "sys/kernel/mm/damon/admin/kdamonds/0/";
  const std::string region = kd + "contexts/0/targets/0/regions/0/";
  t.write(region + "start", "").write(region + "end", "");
  const Pid pid = getpid();
  t.write(kd + "pid", std::to_string(pid));  // the "kdamond" (a key of the reader's map)
  agent::DamonSource d(t.paths(), agent::DamonOptions{.min_regions = 1, .max_regions = 1});
  ASSERT_TRUE(d.start());
  ASSERT_TRUE(d.set_targets(std::vector<Pid>{pid}));
  const auto upto = [&](std::uint64_t end) {
    return std::vector<agent::TargetRanges>{
        {.pid = pid, .ranges = {AddrRange{.start = 1 << 20, .end = end}}}};
  };
  auto ok = d.set_ranges(upto(2 << 20));  // starts the kdamond: configure, "on"
  ASSERT_TRUE(ok) << ok.error().message;
  ASSERT_EQ(t.read(kd + "state"), "on");
  ASSERT_EQ(d.kdamond_pid(), pid);
  ASSERT_EQ(t.read(region + "end"), std::to_string(2 << 20));

  const std::string fifo = t.path(kd + "state").string();
  t.remove(kd + "state");
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  // Opening the FIFO for reading and writing never waits; once open, the
  // commits go through (a way out too, should set_ranges() wait).
  const auto apply = [&] { return open(fifo.c_str(), O_RDWR | O_NONBLOCK | O_CLOEXEC); };
  // Whatever happens below: no commit left waiting, and a plain `state` again
  // for stop() to read and write.
  struct PlainStateAtEnd {
    std::function<void()> run;
    ~PlainStateAtEnd() { run(); }
  } plain_state_at_end{[&] {
    const int fd = apply();
    d.wait_commits();
    if (fd >= 0) close(fd);
    t.remove(kd + "state").write(kd + "state", "on");
  }};
  auto first = std::async(std::launch::async, [&] { return d.set_ranges(upto(3 << 20)); });
  if (first.wait_for(60s) != std::future_status::ready) {
    const int fd = apply();
    first.wait();
    close(fd);
    FAIL() << "set_ranges() waited for the kdamond to apply the commit";
  }
  ASSERT_TRUE(first.get());
  // The commit thread writes the new range, then waits in the "commit" write.
  for (int i = 0; i < 60'000 && t.read(region + "end") != std::to_string(3 << 20); ++i) {
    std::this_thread::sleep_for(1ms);
  }
  ASSERT_EQ(t.read(region + "end"), std::to_string(3 << 20));
  EXPECT_EQ(d.commits(), 0U);
  // Two updates while it waits: the second replaces the first.
  ASSERT_TRUE(d.set_ranges(upto(4 << 20)));
  ASSERT_TRUE(d.set_ranges(upto(5 << 20)));
  const int fd = apply();
  ASSERT_GE(fd, 0);
  d.wait_commits();
  std::string sent(64, '\0');
  const ssize_t n = read(fd, sent.data(), sent.size());
  close(fd);
  sent.resize(n > 0 ? static_cast<std::size_t>(n) : 0);
  EXPECT_EQ(sent, "commitcommit");
  EXPECT_EQ(d.commits(), 2U);
  EXPECT_EQ(d.commits_replaced(), 1U);
  EXPECT_EQ(t.read(region + "end"), std::to_string(5 << 20));

  plain_state_at_end.run();
  d.stop();
  EXPECT_EQ(t.read(kd + "state"), "off");
}

}  // namespace
}  // namespace kvtier
