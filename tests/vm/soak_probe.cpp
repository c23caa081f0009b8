// kvtier_soak_probe: the guest-side helpers of scripts/soak.sh (issue 37).
//
//   kvtier_soak_probe clients SOCKET N   holds N idle connections to kvtierd's
//       control socket (connected, never writing) until SIGTERM, then prints
//       {"clients":N,"connected":C,"closed_by_daemon":D}: D of them the daemon
//       closed (read returned 0 or failed); C connected at all.
//   kvtier_soak_probe bpf-progs          prints the number of BPF programs
//       loaded in the kernel (BPF_PROG_GET_NEXT_ID), for "none left behind".
//   kvtier_soak_probe scrape PORT MS     GETs http://127.0.0.1:PORT/metrics
//       every MS milliseconds until SIGTERM, one line a scrape: "ok BYTES"
//       (status 200 and a kvtier_ metric in the body) or "failed WHY". The
//       guest's busybox wget dies with SIGSEGV, and one process costs less
//       than one exec a scrape under TCG.
//   kvtier_soak_probe metric PORT NAME [LABEL=VALUE...]   prints the sum of
//       the samples of metric NAME whose labels include every LABEL="VALUE"
//       given (0 when none), from one GET of /metrics; exit 1 when the GET
//       fails.

#include <arpa/inet.h>
#include <linux/bpf.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string>
#include <utility>
#include <vector>

namespace {

int bpf_progs() {
  unsigned int id = 0;
  int n = 0;
  for (;;) {
    bpf_attr attr{};
    attr.start_id = id;
    if (syscall(SYS_bpf, BPF_PROG_GET_NEXT_ID, &attr, sizeof attr) != 0) break;
    id = attr.next_id;
    ++n;
  }
  std::printf("%d\n", n);
  return 0;
}

int clients(const char* path, int n) {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigprocmask(SIG_BLOCK, &set, nullptr);
  std::vector<int> fds;
  for (int i = 0; i < n; ++i) {
    const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::strncpy(addr.sun_path, path, sizeof addr.sun_path - 1);
    if (fd < 0 || connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0) {
      if (fd >= 0) close(fd);
      continue;
    }
    fds.push_back(fd);
  }
  std::fprintf(stderr, "kvtier_soak_probe: %zu idle clients connected to %s\n", fds.size(), path);
  sigwaitinfo(&set, nullptr);
  int closed = 0;
  for (const int fd : fds) {
    pollfd p{.fd = fd, .events = POLLIN, .revents = 0};
    char c = 0;
    if (poll(&p, 1, 0) > 0 && (p.revents & (POLLHUP | POLLERR)) != 0) {
      ++closed;
    } else if (p.revents & POLLIN) {
      if (read(fd, &c, 1) <= 0) ++closed;
    }
    close(fd);
  }
  std::printf("{\"clients\":%d,\"connected\":%zu,\"closed_by_daemon\":%d}\n", n, fds.size(),
              closed);
  return 0;
}

// One GET of /metrics; "" when it was a good answer, else why not. The answer
// goes to *body when given.
std::string scrape_once(int port, std::size_t& bytes, std::string* body = nullptr) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return std::string("socket: ") + std::strerror(errno);
  timeval tv{.tv_sec = 5, .tv_usec = 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<std::uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0) {
    const int err = errno;
    close(fd);
    return std::string("connect: ") + std::strerror(err);
  }
  const std::string req = "GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
  if (send(fd, req.data(), req.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(req.size())) {
    const int err = errno;
    close(fd);
    return std::string("send: ") + std::strerror(err);
  }
  std::string resp;
  char buf[65536];
  ssize_t n = 0;
  while ((n = recv(fd, buf, sizeof buf, 0)) > 0) resp.append(buf, static_cast<std::size_t>(n));
  const int err = errno;
  close(fd);
  if (n < 0) return std::string("recv: ") + std::strerror(err);
  bytes = resp.size();
  if (resp.compare(0, 12, "HTTP/1.1 200") != 0 && resp.compare(0, 12, "HTTP/1.0 200") != 0) {
    return "status: " + resp.substr(0, resp.find('\r'));
  }
  if (resp.find("\nkvtier_") == std::string::npos) return "no kvtier_ metric in the body";
  if (body != nullptr) *body = std::move(resp);
  return "";
}

// The sum of NAME's samples whose label set holds every one of `want`
// (LABEL=VALUE, matched as LABEL="VALUE").
int metric(int port, const std::string& name, const std::vector<std::string>& want) {
  std::size_t bytes = 0;
  std::string body;
  if (const std::string why = scrape_once(port, bytes, &body); !why.empty()) {
    std::fprintf(stderr, "kvtier_soak_probe: GET /metrics on port %d: %s\n", port, why.c_str());
    return 1;
  }
  double sum = 0;
  std::size_t at = 0;
  while (at < body.size()) {
    const std::size_t eol = std::min(body.find('\n', at), body.size());
    const std::string line = body.substr(at, eol - at);
    at = eol + 1;
    if (line.compare(0, name.size(), name) != 0 || line.size() <= name.size()) continue;
    const char next = line[name.size()];
    if (next != '{' && next != ' ') continue;
    const std::size_t close = line.find('}');
    const std::string labels = next == '{' && close != std::string::npos
                                   ? line.substr(name.size(), close - name.size() + 1)
                                   : std::string();
    bool all = true;
    for (const std::string& kv : want) {
      const std::size_t eq = kv.find('=');
      const std::string quoted = kv.substr(0, eq) + "=\"" + kv.substr(eq + 1) + "\"";
      all = all && (labels.find("{" + quoted) != std::string::npos ||
                    labels.find("," + quoted) != std::string::npos);
    }
    if (all) sum += std::strtod(line.c_str() + line.rfind(' ') + 1, nullptr);
  }
  std::printf("%.0f\n", sum);
  return 0;
}

int scrape(int port, int interval_ms) {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigprocmask(SIG_BLOCK, &set, nullptr);
  const timespec pause{.tv_sec = interval_ms / 1000, .tv_nsec = (interval_ms % 1000) * 1000000L};
  for (;;) {
    std::size_t bytes = 0;
    const std::string why = scrape_once(port, bytes);
    if (why.empty()) {
      std::printf("ok %zu\n", bytes);
    } else {
      std::printf("failed %s\n", why.c_str());
    }
    std::fflush(stdout);
    if (sigtimedwait(&set, nullptr, &pause) == SIGTERM) return 0;
  }
}

}  // namespace

int main(int argc, char** argv) {
  const std::string cmd = argc > 1 ? argv[1] : "";
  if (cmd == "bpf-progs" && argc == 2) return bpf_progs();
  if (cmd == "clients" && argc == 4) return clients(argv[2], std::atoi(argv[3]));
  if (cmd == "scrape" && argc == 4) return scrape(std::atoi(argv[2]), std::atoi(argv[3]));
  if (cmd == "metric" && argc >= 4) {
    return metric(std::atoi(argv[2]), argv[3], std::vector<std::string>(argv + 4, argv + argc));
  }
  std::fprintf(stderr,
               "usage: kvtier_soak_probe clients SOCKET N | bpf-progs | scrape PORT MS | "
               "metric PORT NAME [LABEL=VALUE...]\n");
  return 2;
}
