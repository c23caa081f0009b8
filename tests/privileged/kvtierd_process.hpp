#pragma once
// Running the kvtierd and kvtierctl programs from a test: a command's exit
// status and output, kvtierd in the background with its log in a file, and
// waiting for a condition without a fixed sleep.

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace kvtier::agent::testing {

inline const std::string kBin = std::string(KVTIER_BUILD_DIR) + "/agent/";

struct Run {
  int code = -1;
  std::string out;  // stdout and stderr
};

inline Run run(const std::string& cmd) {
  Run r;
  FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  if (p == nullptr) return r;
  char buf[4096];
  for (std::size_t n; (n = fread(buf, 1, sizeof buf, p)) > 0;) r.out.append(buf, n);
  const int st = pclose(p);
  r.code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return r;
}

inline std::string slurp(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// kvtierd in the background, stdout and stderr to a file.
struct Kvtierd {
  pid_t pid = -1;
  std::filesystem::path log;
  Kvtierd(const std::vector<std::string>& args, const std::filesystem::path& logfile)
      : log(logfile) {
    pid = fork();
    if (pid == 0) {
      const int fd = open(logfile.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      dup2(fd, STDERR_FILENO);
      dup2(fd, STDOUT_FILENO);
      std::vector<char*> argv;
      std::string bin = kBin + "kvtierd";
      argv.push_back(bin.data());
      std::vector<std::string> copy = args;
      for (auto& a : copy) argv.push_back(a.data());
      argv.push_back(nullptr);
      execv(bin.c_str(), argv.data());
      _exit(127);
    }
  }
  // Exit status, or -1 if it did not exit within `timeout`.
  int wait_exit(std::chrono::milliseconds timeout) {
    const auto end = std::chrono::steady_clock::now() + timeout;
    int st = 0;
    while (std::chrono::steady_clock::now() < end) {
      if (waitpid(pid, &st, WNOHANG) == pid) {
        pid = -1;
        return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return -1;
  }
  ~Kvtierd() {
    if (pid > 0) {
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
    }
  }
  Kvtierd(const Kvtierd&) = delete;
  Kvtierd& operator=(const Kvtierd&) = delete;
};

// The smallest config kvtierd runs with here: one group (at least one is
// required) selecting no process, and a socket group every host has.
inline std::string minimal_config(const std::string& more = "") {
  return "[telemetry]\nsocket_group = \"root\"\n"
         "[[group]]\nname = \"none\"\n"
         "[group.select]\ncomm = [\"^kvtier-selects-nothing$\"]\n" +
         more;
}

// Waits for what must happen; the limit only ends a test whose condition never comes, and is
// long because a loaded machine (a busy CI host, guests beside it) can hold a process for seconds.
inline bool wait_for(const std::function<bool()>& cond,
                     std::chrono::milliseconds timeout = std::chrono::seconds(30)) {
  const auto end = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < end) {
    if (cond()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return cond();
}

}  // namespace kvtier::agent::testing
