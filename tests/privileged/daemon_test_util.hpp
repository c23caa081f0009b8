#pragma once
// Helpers for the daemon's privileged tests: clients in forked
// children (so the test process keeps pumping the daemon's event loop), and
// dropping a child to an unprivileged user.

#include <fcntl.h>
#include <grp.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "agent/daemon/event_loop.hpp"

namespace kvtier::agent::testing {

inline constexpr uid_t kNobody = 65534;
inline constexpr gid_t kNogroup = 65534;

inline void write_all(int fd, const std::string& s) {
  std::size_t off = 0;
  while (off < s.size()) {
    const ssize_t n = write(fd, s.data() + off, s.size() - off);
    if (n <= 0) return;
    off += static_cast<std::size_t>(n);
  }
}

struct ChildResult {
  int exit_code = -1;
  std::string out;
};

// Forks; the child runs `fn(out_fd)` and exits with its result; the parent
// pumps `loop` until the child is gone (at most `timeout`, long: it only ends a
// child that hangs) and collects what the child wrote to out_fd.
inline ChildResult in_child(EventLoop& loop, const std::function<int(int)>& fn,
                            std::chrono::milliseconds timeout = std::chrono::seconds(30)) {
  int p[2];
  if (pipe2(p, O_CLOEXEC) != 0) return {};
  const pid_t pid = fork();
  if (pid == 0) {
    close(p[0]);
    const int rc = fn(p[1]);
    close(p[1]);
    _exit(rc);
  }
  close(p[1]);
  fcntl(p[0], F_SETFL, O_NONBLOCK);
  ChildResult r;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  int status = 0;
  char buf[4096];
  while (true) {
    [[maybe_unused]] auto ran = loop.run_once(std::chrono::milliseconds(5));
    for (ssize_t n; (n = read(p[0], buf, sizeof buf)) > 0;)
      r.out.append(buf, static_cast<std::size_t>(n));
    if (waitpid(pid, &status, WNOHANG) == pid) break;
    if (std::chrono::steady_clock::now() > deadline) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      r.out += "[child timed out]";
      break;
    }
  }
  for (ssize_t n; (n = read(p[0], buf, sizeof buf)) > 0;)
    r.out.append(buf, static_cast<std::size_t>(n));
  close(p[0]);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return r;
}

// In a child: become uid/gid 65534 with the given supplementary groups.
inline bool drop_to_nobody(const std::vector<gid_t>& groups) {
  return setgroups(groups.size(), groups.data()) == 0 && setgid(kNogroup) == 0 &&
         setuid(kNobody) == 0;
}

}  // namespace kvtier::agent::testing
