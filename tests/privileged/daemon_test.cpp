// The daemon shell on the real kernel: socket permissions and peer checks,
// commands, signals, systemd notifications and the Prometheus endpoint.

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "agent/daemon/control_client.hpp"
#include "agent/daemon/control_server.hpp"
#include "agent/daemon/daemon.hpp"
#include "agent/daemon/idle_yield.hpp"
#include "fixture.hpp"
#include "privileged/daemon_test_util.hpp"

namespace kvtier::agent {
namespace {

using namespace std::chrono_literals;
using kvtier::testing::Fixture;
using nlohmann::json;
using testing::ChildResult;
using testing::drop_to_nobody;
using testing::in_child;
using testing::write_all;

#define REQUIRE_ROOT() \
  if (geteuid() != 0) GTEST_SKIP() << "needs root (chown to another group, setuid children)"

// Calls `command` from a child process and writes the result (or "ERR: msg").
int call_and_report(const std::filesystem::path& sock, const std::string& command, int out,
                    const json& args = json::object()) {
  auto c = ControlClient::connect(sock);
  if (!c) {
    write_all(out, "ERR: " + c.error().message);
    return 3;
  }
  auto r = c->call(command, args);
  if (!r) {
    write_all(out, "ERR: " + r.error().message);
    return 1;
  }
  write_all(out, r->dump());
  return 0;
}

struct Server {
  std::unique_ptr<EventLoop> loop;
  std::unique_ptr<ControlServer> server;
};

Server open_server(const ControlSocketOptions& opts) {
  Server s;
  auto loop = EventLoop::create();
  EXPECT_TRUE(loop);
  s.loop = std::move(*loop);
  auto srv = ControlServer::open(*s.loop, opts);
  EXPECT_TRUE(srv) << srv.error().message;
  if (srv) s.server = std::move(*srv);
  return s;
}

TEST(ControlSocket, CreatedWithModeOwnerAndGroup) {
  REQUIRE_ROOT();
  Fixture dir;
  const auto path = dir.path() / "kvtierd.sock";
  auto s = open_server({.path = path, .mode = 0660, .owner = "nobody", .group = "nogroup"});
  ASSERT_TRUE(s.server);
  struct stat st {};
  ASSERT_EQ(lstat(path.c_str(), &st), 0);
  EXPECT_TRUE(S_ISSOCK(st.st_mode));
  EXPECT_EQ(st.st_mode & 07777, 0660U);
  EXPECT_EQ(st.st_uid, testing::kNobody);
  EXPECT_EQ(st.st_gid, testing::kNogroup);
  s.server.reset();
  EXPECT_FALSE(std::filesystem::exists(path)) << "the socket must be removed on close";
}

TEST(ControlSocket, UnknownGroupIsAnErrorNamingIt) {
  Fixture dir;
  auto loop = EventLoop::create();
  ASSERT_TRUE(loop);
  auto srv = ControlServer::open(**loop, {.path = dir.path() / "s.sock", .group = "no-such-grp"});
  ASSERT_FALSE(srv);
  EXPECT_NE(srv.error().message.find("no-such-grp"), std::string::npos) << srv.error().message;
}

TEST(ControlSocket, SecondServerOnALiveSocketIsRefusedAndLeavesItAlone) {
  Fixture dir;
  const auto path = dir.path() / "s.sock";
  auto first = open_server({.path = path});
  ASSERT_TRUE(first.server);
  auto loop2 = EventLoop::create();
  ASSERT_TRUE(loop2);
  auto second = ControlServer::open(**loop2, {.path = path});
  ASSERT_FALSE(second);
  EXPECT_NE(second.error().message.find("another kvtierd"), std::string::npos);
  EXPECT_TRUE(std::filesystem::exists(path));
  auto r = in_child(*first.loop, [&](int out) { return call_and_report(path, "help", out); });
  EXPECT_EQ(r.exit_code, 0) << r.out;
}

TEST(ControlSocket, StaleSocketFileIsReplaced) {
  Fixture dir;
  const auto path = dir.path() / "s.sock";
  {
    auto first = open_server({.path = path});
    ASSERT_TRUE(first.server);
    // A killed daemon leaves its socket file; simulate by keeping the file.
    const auto keep = dir.path() / "keep.sock";
    std::filesystem::rename(path, keep);
    first.server.reset();
    std::filesystem::rename(keep, path);
  }
  ASSERT_TRUE(std::filesystem::exists(path));
  auto again = open_server({.path = path});
  ASSERT_TRUE(again.server);
}

TEST(ControlSocket, RootClientGetsAnswers) {
  Fixture dir;
  const auto path = dir.path() / "s.sock";
  auto s = open_server({.path = path});
  ASSERT_TRUE(s.server);
  s.server->register_command("echo", [](const json& args, const PeerCred& peer) -> Result<json> {
    return json{{"args", args}, {"uid", peer.uid}};
  });
  auto r = in_child(*s.loop, [&](int out) {
    return call_and_report(path, "echo", out, json{{"x", 1}});
  });
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const json j = json::parse(r.out);
  EXPECT_EQ(j["args"]["x"], 1);
  EXPECT_EQ(j["uid"], geteuid());

  r = in_child(*s.loop, [&](int out) { return call_and_report(path, "frobnicate", out); });
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.out.find("unknown command \"frobnicate\""), std::string::npos) << r.out;

  r = in_child(*s.loop, [&](int out) { return call_and_report(path, "help", out); });
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("echo"), std::string::npos);
}

TEST(ControlSocket, HandlerExceptionBecomesAnErrorReply) {
  Fixture dir;
  const auto path = dir.path() / "s.sock";
  auto s = open_server({.path = path});
  ASSERT_TRUE(s.server);
  s.server->register_command("typed", [](const json& args, const PeerCred&) -> Result<json> {
    return json{{"pid", args.at("pid").get<int>()}};  // throws on a missing or string pid
  });
  auto r = in_child(*s.loop, [&](int out) {
    return call_and_report(path, "typed", out, json{{"pid", "abc"}});
  });
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.out.find("command typed failed"), std::string::npos) << r.out;
  r = in_child(*s.loop, [&](int out) {
    return call_and_report(path, "typed", out, json{{"pid", 7}});
  });
  EXPECT_EQ(r.exit_code, 0) << r.out;
}

TEST(ControlSocket, UnprivilegedPeerIsRejectedByCredentialCheck) {
  REQUIRE_ROOT();
  Fixture dir;
  const auto path = dir.path() / "s.sock";
  // World-writable on purpose: the file mode lets nobody in, the peer check must not.
  auto s = open_server({.path = path, .mode = 0666, .group = "root"});
  ASSERT_TRUE(s.server);
  auto r = in_child(*s.loop, [&](int out) {
    if (!drop_to_nobody({})) return 90;
    return call_and_report(path, "help", out);
  });
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_NE(r.out.find("permission denied: uid 65534"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("member of group root"), std::string::npos) << r.out;
  EXPECT_EQ(s.server->rejected_peers(), 1U);
}

TEST(ControlSocket, UnprivilegedPeerIsStoppedByFileModeWithAHint) {
  REQUIRE_ROOT();
  Fixture dir;
  const auto path = dir.path() / "s.sock";
  auto s = open_server({.path = path, .mode = 0660, .group = "root"});
  ASSERT_TRUE(s.server);
  auto r = in_child(*s.loop, [&](int out) {
    if (!drop_to_nobody({})) return 90;
    return call_and_report(path, "help", out);
  });
  EXPECT_EQ(r.exit_code, 3) << r.out;
  EXPECT_NE(r.out.find("cannot connect to " + path.string() +
                       ": Permission denied (run as root or as a member of group root)"),
            std::string::npos)
      << r.out;
}

TEST(ControlSocket, SupplementaryGroupMemberIsAllowed) {
  REQUIRE_ROOT();
  Fixture dir;
  const auto path = dir.path() / "s.sock";
  auto gid = lookup_group("adm");
  if (!gid) GTEST_SKIP() << "no group adm on this host";
  auto s = open_server({.path = path, .mode = 0660, .group = "adm"});
  ASSERT_TRUE(s.server);
  auto r = in_child(*s.loop, [&](int out) {
    if (!drop_to_nobody({*gid})) return 90;
    return call_and_report(path, "help", out);
  });
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_EQ(s.server->rejected_peers(), 0U);
}

TEST(ControlSocket, MissingSocketSaysIsKvtierdRunning) {
  auto c = ControlClient::connect("/run/kvtier-test-missing/kvtierd.sock");
  ASSERT_FALSE(c);
  EXPECT_EQ(c.error().message,
            "cannot connect to /run/kvtier-test-missing/kvtierd.sock: No such file or directory "
            "(is kvtierd running?)");
}

TEST(ControlSocket, OversizedRequestIsRefusedAndTheConnectionClosed) {
  Fixture dir;
  const auto path = dir.path() / "s.sock";
  auto s = open_server({.path = path, .max_request_bytes = 1024});
  ASSERT_TRUE(s.server);
  auto r = in_child(*s.loop, [&](int out) {
    const int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    std::strncpy(a.sun_path, path.c_str(), sizeof a.sun_path - 1);
    if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) return 3;
    write_all(fd, std::string(4096, 'x'));
    char buf[512];
    std::string got;
    for (ssize_t n; (n = read(fd, buf, sizeof buf)) > 0;)
      got.append(buf, static_cast<std::size_t>(n));
    write_all(out, got);  // read() returned 0: the server closed the connection
    return 0;
  });
  ASSERT_EQ(r.exit_code, 0);
  EXPECT_NE(r.out.find("request longer than 1024 bytes"), std::string::npos) << r.out;
  EXPECT_EQ(s.server->client_count(), 0U);
}

TEST(ControlSocket, ClientThatNeverReadsDoesNotStallTheLoop) {
  Fixture dir;
  const auto path = dir.path() / "s.sock";
  auto s = open_server({.path = path, .max_pending_output = 4 << 20});
  ASSERT_TRUE(s.server);
  const std::string blob(1 << 20, 'k');
  s.server->register_command("big", [&](const json&, const PeerCred&) -> Result<json> {
    return json{{"blob", blob}};
  });
  // The client sends 64 requests, says so through `sent`, and then holds its connection without
  // reading a byte until the loop's 10 ms timer has fired 20 more times (`go`). A loop stalled
  // on the unread replies never gets there, and the child gives up after 30 s with status 4.
  int sent[2];
  int go[2];
  ASSERT_EQ(pipe2(sent, O_CLOEXEC | O_NONBLOCK), 0);
  ASSERT_EQ(pipe2(go, O_CLOEXEC), 0);
  int ticks_after_send = 0;
  ASSERT_TRUE(s.loop->add_timer(10ms, 10ms, [&] {
    char c = 0;
    if (ticks_after_send == 0 && read(sent[0], &c, 1) != 1) return;
    if (++ticks_after_send == 20) write_all(go[1], "g");
  }));
  auto r = in_child(
      *s.loop,
      [&](int) {
        const int fd = socket(AF_UNIX, SOCK_STREAM, 0);
        sockaddr_un a{};
        a.sun_family = AF_UNIX;
        std::strncpy(a.sun_path, path.c_str(), sizeof a.sun_path - 1);
        if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) return 3;
        std::string reqs;
        for (int i = 0; i < 64; ++i) reqs += "{\"command\":\"big\"}\n";
        write_all(fd, reqs);
        write_all(sent[1], "s");
        pollfd p{.fd = go[0], .events = POLLIN, .revents = 0};
        return poll(&p, 1, 30'000) == 1 ? 0 : 4;
      },
      60s);
  for (const int fd : {sent[0], sent[1], go[0], go[1]}) close(fd);
  ASSERT_EQ(r.exit_code, 0) << "the loop stalled: " << ticks_after_send
                            << " ticks after the requests";
  EXPECT_GE(ticks_after_send, 20);
  // The client has gone: the server sees the hang-up on its next turn and forgets it.
  const auto end = std::chrono::steady_clock::now() + 30s;
  while (s.server->client_count() != 0 && std::chrono::steady_clock::now() < end) {
    ASSERT_TRUE(s.loop->run_once(5ms));
  }
  EXPECT_EQ(s.server->client_count(), 0U);
}

// ---- the Daemon shell --------------------------------------------------

// What the shell handed one step.
struct SeenStep {
  TimeNs now = 0;
  bool paused = false;
};

struct StepLog {
  std::vector<SeenStep> steps;
  int shutdowns = 0;
  Result<DaemonSettings> next_reload = fail("no reload prepared");
};

DaemonHooks recording_hooks(const std::shared_ptr<StepLog>& log) {
  return DaemonHooks{
      .step = [log](TimeNs now, bool paused, Telemetry& t) -> Result<void> {
        log->steps.push_back(SeenStep{.now = now, .paused = paused});
        t.record_source_batch("fake", 10, 2);
        return {};
      },
      .reload = [log]() { return log->next_reload; },
      .describe =
          [](bool full) {
            return json{{"full", full}};
          },
      .summary = [] { return std::string("fake loop"); },
      .shutdown = [log] { ++log->shutdowns; },
  };
}

std::unique_ptr<Daemon> make_daemon(const Fixture& dir, const std::shared_ptr<StepLog>& log,
                                    DaemonSettings s = {}) {
  s.socket_path = dir.path() / "kvtierd.sock";
  if (s.interval == DaemonSettings{}.interval) s.interval = 20ms;
  auto d = Daemon::create(s, recording_hooks(log));
  EXPECT_TRUE(d) << d.error().message;
  return d ? std::move(*d) : nullptr;
}

// The periods of this process's timerfds as the kernel holds them (/proc/self/fdinfo), shortest
// first. In the tests that call it there are two: the daemon's step timer and the control
// socket's deadline sweep (a quarter of the shortest client timeout, at most 1 s).
std::vector<std::chrono::nanoseconds> timer_intervals() {
  std::vector<std::chrono::nanoseconds> out;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator("/proc/self/fd", ec)) {
    if (std::filesystem::read_symlink(e.path(), ec).string() != "anon_inode:[timerfd]") continue;
    std::ifstream info("/proc/self/fdinfo/" + e.path().filename().string());
    std::string line;
    while (std::getline(info, line)) {
      long long sec = 0;
      long long nsec = 0;
      if (std::sscanf(line.c_str(), "it_interval: (%lld, %lld)", &sec, &nsec) == 2) {
        out.emplace_back(std::chrono::seconds(sec) + std::chrono::nanoseconds(nsec));
      }
    }
  }
  std::ranges::sort(out);
  return out;
}

// Pumps the loop until `done` holds. The tests wait for what must happen, never for a fixed
// time: on a loaded machine a 60 ms window can pass without the test process running at all.
// The 30 s limit is only there to end a test whose condition never comes.
[[nodiscard]] bool pump_until(Daemon& d, const std::function<bool()>& done) {
  const auto end = std::chrono::steady_clock::now() + 30s;
  while (!done()) {
    if (std::chrono::steady_clock::now() > end || !d.loop().run_once(5ms)) return false;
  }
  return true;
}

TEST(Daemon, PauseAndResumeReachTheStep) {
  Fixture dir;
  auto log = std::make_shared<StepLog>();
  auto d = make_daemon(dir, log);
  ASSERT_TRUE(d);
  ASSERT_TRUE(d->start());
  const auto sock = d->settings().socket_path;
  ASSERT_TRUE(pump_until(*d, [&] { return !log->steps.empty(); }));
  EXPECT_FALSE(log->steps.back().paused);

  auto r = in_child(d->loop(), [&](int out) { return call_and_report(sock, "pause", out); });
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_EQ(json::parse(r.out)["changed"], true);
  EXPECT_TRUE(d->paused());
  log->steps.clear();
  ASSERT_TRUE(pump_until(*d, [&] { return !log->steps.empty(); }));
  EXPECT_TRUE(log->steps.back().paused);
  EXPECT_EQ(d->telemetry().value("kvtier_paused"), 1);

  r = in_child(d->loop(), [&](int out) { return call_and_report(sock, "pause", out); });
  EXPECT_EQ(json::parse(r.out)["changed"], false);
  r = in_child(d->loop(), [&](int out) { return call_and_report(sock, "resume", out); });
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_FALSE(d->paused());
  log->steps.clear();
  ASSERT_TRUE(pump_until(*d, [&] { return !log->steps.empty(); }));
  EXPECT_FALSE(log->steps.back().paused);
}

// The return watch's fd (here a pipe) turning readable runs the promotion tick
// promote_wake later, once for a burst, with no promote_interval at all; the fd
// is watched again after the tick.
TEST(Daemon, AWakeFdRunsThePromotionTickSoonOnceABurst) {
  Fixture dir;
  auto log = std::make_shared<StepLog>();
  int wake[2];
  ASSERT_EQ(pipe2(wake, O_CLOEXEC | O_NONBLOCK), 0);
  int ticks = 0;
  std::vector<std::chrono::steady_clock::time_point> at;
  DaemonHooks hooks = recording_hooks(log);
  hooks.promote = [&](TimeNs, Telemetry&) -> Result<void> {
    ++ticks;
    at.push_back(std::chrono::steady_clock::now());
    char buf[64];
    while (read(wake[0], buf, sizeof buf) > 0) {
    }
    return {};
  };
  hooks.wake_fd = [&] { return wake[0]; };
  DaemonSettings s;
  s.socket_path = dir.path() / "kvtierd.sock";
  s.interval = 3600s;  // one step, at start
  s.promote_interval = 0ms;
  s.promote_wake = 40ms;
  auto d = Daemon::create(s, std::move(hooks));
  ASSERT_TRUE(d) << d.error().message;
  ASSERT_TRUE((*d)->start());
  ASSERT_TRUE(pump_until(**d, [&] { return !log->steps.empty(); }));
  EXPECT_EQ(ticks, 0);
  const auto sent = std::chrono::steady_clock::now();
  ASSERT_EQ(write(wake[1], "ab", 2), 2);
  ASSERT_TRUE(pump_until(**d, [&] { return ticks == 1; }));
  EXPECT_GE(at[0] - sent, 40ms) << "the tick waits promote_wake for the rest of the burst";
  for (int i = 0; i < 10; ++i) ASSERT_TRUE((*d)->loop().run_once(10ms));
  EXPECT_EQ(ticks, 1) << "the tick drained the fd: nothing more to do";
  ASSERT_EQ(write(wake[1], "c", 1), 1);
  ASSERT_TRUE(pump_until(**d, [&] { return ticks == 2; }));
  EXPECT_EQ((*d)->status_json()["promote_wakes"], 2);
  d->reset();
  for (const int fd : wake) close(fd);
}

// promote_yield: the tick runs at SCHED_IDLE, and the watcher puts the thread
// back to SCHED_OTHER when the bound passes before the tick ends.
// The first run's bound is a minute: at SCHED_IDLE on a loaded machine (CI runs
// lint beside the tests) the work may wait far longer than a short bound.
TEST(IdleYield, RunsAtSchedIdleAndIsPutBackAtTheBound) {
  auto unbounded = IdleYield::create(60s);
  ASSERT_TRUE(unbounded) << unbounded.error().message;
  ASSERT_EQ(sched_getscheduler(0), SCHED_OTHER);
  int during = -1;
  ASSERT_TRUE((*unbounded)->run([&] { during = sched_getscheduler(0); }));
  EXPECT_EQ(during, SCHED_IDLE);
  EXPECT_EQ(sched_getscheduler(0), SCHED_OTHER) << "back after the work";
  EXPECT_EQ((*unbounded)->bounded(), 0U);
  unbounded->reset();
  auto y = IdleYield::create(30ms);
  ASSERT_TRUE(y) << y.error().message;
  // Work that outlasts the bound: spins until the watcher has put it back.
  int late = -1;
  const auto began = std::chrono::steady_clock::now();
  ASSERT_TRUE((*y)->run([&] {
    while (sched_getscheduler(0) == SCHED_IDLE && std::chrono::steady_clock::now() - began < 60s) {
    }
    late = sched_getscheduler(0);
  }));
  EXPECT_EQ(late, SCHED_OTHER);
  EXPECT_GE(std::chrono::steady_clock::now() - began, 30ms) << "not before the bound";
  EXPECT_EQ((*y)->bounded(), 1U);
  EXPECT_EQ((*y)->runs(), 1U);
  EXPECT_EQ(sched_getscheduler(0), SCHED_OTHER);
}

// With promote_yield set the daemon's promotion tick runs at SCHED_IDLE.
TEST(Daemon, PromoteYieldRunsTheTickAtSchedIdle) {
  Fixture dir;
  auto log = std::make_shared<StepLog>();
  DaemonHooks hooks = recording_hooks(log);
  std::vector<int> policies;
  hooks.promote = [&](TimeNs, Telemetry&) -> Result<void> {
    policies.push_back(sched_getscheduler(0));
    return {};
  };
  DaemonSettings s;
  s.socket_path = dir.path() / "kvtierd.sock";
  s.interval = 3600s;
  s.promote_interval = 10ms;
  s.promote_yield = 60s;  // a loaded machine may hold a SCHED_IDLE tick back far beyond 50 ms
  auto d = Daemon::create(s, std::move(hooks));
  ASSERT_TRUE(d) << d.error().message;
  ASSERT_TRUE((*d)->start());
  ASSERT_TRUE(pump_until(**d, [&] { return policies.size() >= 2; }));
  EXPECT_EQ(policies[0], SCHED_IDLE);
  EXPECT_EQ(policies[1], SCHED_IDLE);
  EXPECT_EQ(sched_getscheduler(0), SCHED_OTHER);
  EXPECT_TRUE((*d)->status_json()["promote_yield"]["on"]);
  EXPECT_GE((*d)->status_json()["promote_yield"]["ticks"], 2);
  d->reset();
}

TEST(Daemon, StatusAndDumpOverTheSocket) {
  Fixture dir;
  auto log = std::make_shared<StepLog>();
  auto d = make_daemon(dir, log);
  ASSERT_TRUE(d);
  ASSERT_TRUE(d->start());
  ASSERT_TRUE(pump_until(*d, [&] { return !log->steps.empty(); }));
  const auto sock = d->settings().socket_path;
  auto r = in_child(d->loop(), [&](int out) { return call_and_report(sock, "status", out); });
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const json st = json::parse(r.out);
  EXPECT_EQ(st["pid"], getpid());
  EXPECT_EQ(st["state"], "active");
  EXPECT_GE(st["steps"].get<int>(), 1);
  EXPECT_EQ(st["loop"]["full"], false);
  EXPECT_EQ(st["prometheus"]["enabled"], false);

  r = in_child(d->loop(), [&](int out) { return call_and_report(sock, "dump", out); });
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const json dump = json::parse(r.out);
  EXPECT_EQ(dump["loop"]["full"], true);
  EXPECT_EQ(dump["settings"]["socket_mode"], "0660");
  const auto& samples = dump["telemetry"]["kvtier_source_samples_total"]["series"];
  ASSERT_EQ(samples.size(), 1U);
  EXPECT_EQ(samples[0]["labels"]["source"], "fake");
  EXPECT_GE(samples[0]["value"].get<double>(), 10.0);
}

TEST(Daemon, SighupAppliesAGoodReload) {
  Fixture dir;
  auto log = std::make_shared<StepLog>();
  auto d = make_daemon(dir, log);
  ASSERT_TRUE(d);
  ASSERT_TRUE(d->start());
  DaemonSettings next = d->settings();
  next.interval = 5ms;
  log->next_reload = next;
  EXPECT_EQ(timer_intervals(), (std::vector<std::chrono::nanoseconds>{20ms, 1s}));
  ASSERT_EQ(kill(getpid(), SIGHUP), 0);
  ASSERT_TRUE(pump_until(*d, [&] { return d->settings().interval == 5ms; }));
  EXPECT_EQ(d->reloads_rejected(), 0U);
  EXPECT_EQ(d->telemetry().value("kvtier_reloads_total", {{"result", "applied"}}), 1);
  // The new interval is in force: the kernel's step timer is rearmed to 5 ms (read from the
  // timerfd itself, not inferred from how many steps a loaded machine managed to run).
  EXPECT_EQ(timer_intervals(), (std::vector<std::chrono::nanoseconds>{5ms, 1s}));
  log->steps.clear();
  ASSERT_TRUE(pump_until(*d, [&] { return log->steps.size() >= 10; }));
}

TEST(Daemon, SighupRejectsABadReloadAndKeepsTheRunningSettings) {
  Fixture dir;
  auto log = std::make_shared<StepLog>();
  auto d = make_daemon(dir, log);
  ASSERT_TRUE(d);
  ASSERT_TRUE(d->start());
  const DaemonSettings before = d->settings();
  log->next_reload = fail(
      "/etc/kvtier/kvtier.toml:3:1: unknown key 'intreval'\n"
      "/etc/kvtier/kvtier.toml:9:12: policy.cold_age must be positive");
  ASSERT_EQ(kill(getpid(), SIGHUP), 0);
  ASSERT_TRUE(pump_until(*d, [&] { return d->reloads_rejected() == 1U; }));
  EXPECT_EQ(d->settings(), before);
  const json st = d->status_json();
  ASSERT_EQ(st["last_reload_errors"].size(), 2U);
  EXPECT_EQ(st["last_reload_errors"][0], "/etc/kvtier/kvtier.toml:3:1: unknown key 'intreval'");

  // Settings the hook accepted but the shell cannot run are rejected too.
  DaemonSettings exposed = before;
  exposed.prometheus_enabled = true;
  exposed.prometheus_listen = "0.0.0.0:9464";
  log->next_reload = exposed;
  EXPECT_FALSE(d->reload());
  EXPECT_EQ(d->settings(), before);
  EXPECT_EQ(d->prometheus(), nullptr);

  // And the loop goes on.
  log->steps.clear();
  EXPECT_TRUE(pump_until(*d, [&] { return !log->steps.empty(); }));
}

TEST(Daemon, SigtermStopsCleanlyAndRemovesTheSocket) {
  Fixture dir;
  auto log = std::make_shared<StepLog>();
  auto d = make_daemon(dir, log);
  ASSERT_TRUE(d);
  ASSERT_TRUE(d->start());
  const auto sock = d->settings().socket_path;
  ASSERT_TRUE(std::filesystem::exists(sock));
  ASSERT_TRUE(d->loop().add_timer(50ms, 0ms, [] { kill(getpid(), SIGTERM); }));
  auto ran = d->run();
  ASSERT_TRUE(ran) << ran.error().message;
  EXPECT_EQ(log->shutdowns, 1);
  EXPECT_FALSE(log->steps.empty());
  EXPECT_FALSE(std::filesystem::exists(sock));
}

TEST(Daemon, StepErrorsAreCountedAndTheLoopGoesOn) {
  Fixture dir;
  int calls = 0;
  DaemonHooks hooks{.step = [&](TimeNs, bool, Telemetry&) -> Result<void> {
    ++calls;
    if (calls <= 3) return fail("pid 4242 exited");
    return {};
  }};
  auto d = Daemon::create(DaemonSettings{.socket_path = dir.path() / "s.sock", .interval = 10ms},
                          std::move(hooks));
  ASSERT_TRUE(d);
  ASSERT_TRUE((*d)->start());
  ASSERT_TRUE(pump_until(**d, [&] { return calls >= 5; }));
  EXPECT_EQ((*d)->status_json()["step_errors"], 3);
  EXPECT_TRUE((*d)->status_json()["last_step_error"].is_null());
  EXPECT_EQ((*d)->telemetry().value("kvtier_loop_steps_total", {{"result", "error"}}), 3);
}

// A datagram socket standing in for systemd's notification socket.
struct NotifySocket {
  int fd = -1;
  std::filesystem::path path;
  explicit NotifySocket(const std::filesystem::path& p) : path(p) {
    fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    std::strncpy(a.sun_path, p.c_str(), sizeof a.sun_path - 1);
    EXPECT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  }
  ~NotifySocket() { close(fd); }
  NotifySocket(const NotifySocket&) = delete;
  NotifySocket& operator=(const NotifySocket&) = delete;
  std::vector<std::string> drain() const {
    std::vector<std::string> out;
    char buf[4096];
    for (ssize_t n; (n = recv(fd, buf, sizeof buf, 0)) > 0;)
      out.emplace_back(buf, static_cast<std::size_t>(n));
    return out;
  }
};

bool any_contains(const std::vector<std::string>& msgs, const std::string& what) {
  for (const auto& m : msgs) {
    if (m.find(what) != std::string::npos) return true;
  }
  return false;
}

TEST(Daemon, TellsSystemdReadyStatusWatchdogReloadingStopping) {
  Fixture dir;
  NotifySocket ns(dir.path() / "notify");
  setenv("NOTIFY_SOCKET", ns.path.c_str(), 1);
  setenv("WATCHDOG_USEC", "40000", 1);
  unsetenv("WATCHDOG_PID");
  auto log = std::make_shared<StepLog>();
  auto d = make_daemon(dir, log);
  // sd_notify reads NOTIFY_SOCKET at every call; the watchdog period is read once.
  unsetenv("WATCHDOG_USEC");
  struct Unset {
    ~Unset() { unsetenv("NOTIFY_SOCKET"); }
  } unset_at_exit;
  ASSERT_TRUE(d);
  ASSERT_TRUE(d->start());
  // Drain as systemd would (the queue holds only net.unix.max_dgram_qlen datagrams) until
  // 5 steps and a watchdog ping went by.
  std::vector<std::string> msgs;
  ASSERT_TRUE(pump_until(*d, [&] {
    for (auto& m : ns.drain()) msgs.push_back(std::move(m));
    return log->steps.size() >= 5 && any_contains(msgs, "WATCHDOG=1");
  }));
  ASSERT_FALSE(msgs.empty());
  EXPECT_EQ(msgs.front(), "READY=1\nSTATUS=running: fake loop");
  EXPECT_TRUE(any_contains(msgs, "STATUS=active; fake loop"));
  // 5 steps ran, yet STATUS= went out once: it changes with the state only.
  EXPECT_EQ(std::count_if(msgs.begin(), msgs.end(),
                          [](const std::string& m) { return m.starts_with("STATUS="); }),
            1);

  log->next_reload = d->settings();
  ASSERT_EQ(kill(getpid(), SIGHUP), 0);
  msgs.clear();
  EXPECT_TRUE(pump_until(*d, [&] {
    for (auto& m : ns.drain()) msgs.push_back(std::move(m));
    return any_contains(msgs, "READY=1");
  }));
  EXPECT_TRUE(any_contains(msgs, "RELOADING=1"));

  ns.drain();
  ASSERT_TRUE(d->loop().add_timer(1ms, 0ms, [] { kill(getpid(), SIGTERM); }));
  ASSERT_TRUE(d->run());
  EXPECT_TRUE(any_contains(ns.drain(), "STOPPING=1"));
}

// A minimal HTTP/1.0 GET, enough for /metrics.
Result<std::string> http_get(int port, const std::string& path) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<std::uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    const int err = errno;
    close(fd);
    return fail(errno_text(err), err);
  }
  timeval tv{.tv_sec = 5, .tv_usec = 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  write_all(fd, "GET " + path + " HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n");
  std::string got;
  char buf[4096];
  for (ssize_t n; (n = read(fd, buf, sizeof buf)) > 0;)
    got.append(buf, static_cast<std::size_t>(n));
  close(fd);
  return got;
}

TEST(Daemon, PrometheusServesMetricsOnLoopbackAndGoesAwayWhenTurnedOff) {
  Fixture dir;
  auto log = std::make_shared<StepLog>();
  auto d = make_daemon(
      dir, log, DaemonSettings{.prometheus_enabled = true, .prometheus_listen = "127.0.0.1:0"});
  ASSERT_TRUE(d);
  ASSERT_TRUE(d->start());
  ASSERT_NE(d->prometheus(), nullptr);
  const int port = d->prometheus()->port();
  ASSERT_GT(port, 0);
  ASSERT_TRUE(pump_until(*d, [&] { return !log->steps.empty(); }));
  auto body = http_get(port, "/metrics");
  ASSERT_TRUE(body) << body.error().message;
  EXPECT_NE(body->find("200 OK"), std::string::npos) << *body;
  EXPECT_NE(body->find("# TYPE kvtier_loop_duration_seconds histogram"), std::string::npos);
  EXPECT_NE(body->find("kvtier_source_samples_total{source=\"fake\"}"), std::string::npos) << *body;
  EXPECT_NE(body->find("kvtier_loop_duration_seconds_bucket{le=\"+Inf\"}"), std::string::npos);

  DaemonSettings off = d->settings();
  off.prometheus_enabled = false;
  log->next_reload = off;
  ASSERT_TRUE(d->reload());
  EXPECT_EQ(d->prometheus(), nullptr);
  auto gone = http_get(port, "/metrics");
  ASSERT_FALSE(gone);
  EXPECT_EQ(gone.error().code, ECONNREFUSED);
}

TEST(Daemon, PrometheusIsOffByDefault) {
  Fixture dir;
  auto log = std::make_shared<StepLog>();
  auto d = make_daemon(dir, log);
  ASSERT_TRUE(d);
  ASSERT_TRUE(d->start());
  EXPECT_EQ(d->prometheus(), nullptr);
  EXPECT_FALSE(DaemonSettings{}.prometheus_enabled);
  EXPECT_EQ(DaemonSettings{}.prometheus_listen, "127.0.0.1:9464");
}

}  // namespace
}  // namespace kvtier::agent
