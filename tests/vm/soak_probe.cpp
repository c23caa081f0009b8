// kvtier_soak_probe: the guest-side helpers of scripts/soak.sh (issue 37).
//
//   kvtier_soak_probe clients SOCKET N   holds N idle connections to kvtierd's
//       control socket (connected, never writing) until SIGTERM, then prints
//       {"clients":N,"connected":C,"closed_by_daemon":D}: D of them the daemon
//       closed (read returned 0 or failed); C connected at all.
//   kvtier_soak_probe bpf-progs          prints the number of BPF programs
//       loaded in the kernel (BPF_PROG_GET_NEXT_ID), for "none left behind".

#include <linux/bpf.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
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

}  // namespace

int main(int argc, char** argv) {
  const std::string cmd = argc > 1 ? argv[1] : "";
  if (cmd == "bpf-progs" && argc == 2) return bpf_progs();
  if (cmd == "clients" && argc == 4) return clients(argv[2], std::atoi(argv[3]));
  std::fprintf(stderr, "usage: kvtier_soak_probe clients SOCKET N | bpf-progs\n");
  return 2;
}
