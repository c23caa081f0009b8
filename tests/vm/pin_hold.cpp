// kvtier_pin_hold: a guest-side process with a long-term pinned buffer, for
// vm.pinned. Maps TOTAL MiB, writes all of it, then registers PIN MiB of it (at
// OFFSET MiB) as an io_uring fixed buffer (IORING_REGISTER_BUFFERS pins its
// pages with FOLL_LONGTERM), and holds it for SECONDS.
//
// Usage: kvtier_pin_hold [--total-mib N] [--pin-mib P] [--pin-offset-mib O]
//                        [--pin-node1 0|1] [--seconds S]
// --pin-node1 1 binds the part to be pinned to node 1 (mbind) before it is
// written, so the test sees where the kernel leaves it once pinned.
// Prints one JSON line: its pid, the buffer and the pinned range, and the node
// of every page of the pinned range before and after the registration
// ({"node": pages}).

#include <liburing.h>
#include <linux/mempolicy.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

namespace {

constexpr std::uint64_t kMiB = 1ULL << 20;
constexpr std::uint64_t kPage = 4096;

struct Args {
  std::uint64_t total_mib = 32;
  std::uint64_t pin_mib = 8;
  std::uint64_t pin_offset_mib = 8;
  bool pin_node1 = false;
  unsigned seconds = 60;
};

bool parse(int argc, char** argv, Args& a) {
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    const std::uint64_t v = std::strtoull(argv[i + 1], nullptr, 10);
    if (k == "--total-mib") {
      a.total_mib = v;
    } else if (k == "--pin-mib") {
      a.pin_mib = v;
    } else if (k == "--pin-offset-mib") {
      a.pin_offset_mib = v;
    } else if (k == "--pin-node1") {
      a.pin_node1 = v != 0;
    } else if (k == "--seconds") {
      a.seconds = static_cast<unsigned>(v);
    } else {
      return false;
    }
  }
  return argc % 2 == 1 && a.pin_offset_mib + a.pin_mib <= a.total_mib && a.pin_mib > 0;
}

// {"node": pages} of [p, p + len), by a move_pages(2) status query.
std::string nodes_of(char* p, std::uint64_t len) {
  std::vector<void*> pages;
  for (std::uint64_t o = 0; o < len; o += kPage) pages.push_back(p + o);
  std::vector<int> status(pages.size(), -1);
  if (syscall(SYS_move_pages, 0, pages.size(), pages.data(), nullptr, status.data(), 0) != 0) {
    return "{}";
  }
  std::map<int, std::uint64_t> count;
  for (const int s : status) ++count[s];
  std::string out = "{";
  for (const auto& [node, n] : count) {
    out += (out.size() > 1 ? "," : "") + ("\"" + std::to_string(node) + "\":" + std::to_string(n));
  }
  return out + "}";
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  if (!parse(argc, argv, a)) {
    std::fprintf(stderr,
                 "usage: kvtier_pin_hold [--total-mib N] [--pin-mib P] [--pin-offset-mib O] "
                 "[--pin-node1 0|1] [--seconds S]\n");
    return 2;
  }
  // 2 MiB aligned, so no huge page straddles the pinned range's ends.
  const std::uint64_t len = a.total_mib * kMiB;
  void* raw =
      mmap(nullptr, len + 2 * kMiB, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) {
    std::perror("kvtier_pin_hold: mmap");
    return 1;
  }
  auto* buf = reinterpret_cast<char*>((reinterpret_cast<std::uint64_t>(raw) + 2 * kMiB - 1) /
                                      (2 * kMiB) * (2 * kMiB));
  char* pin = buf + a.pin_offset_mib * kMiB;
  const std::uint64_t pin_len = a.pin_mib * kMiB;
  if (a.pin_node1) {
    unsigned long mask = 1UL << 1;
    if (syscall(SYS_mbind, pin, pin_len, MPOL_BIND, &mask, 8 * sizeof(mask), 0) != 0) {
      std::perror("kvtier_pin_hold: mbind node 1");
      return 1;
    }
  }
  std::memset(buf, 0x5a, len);
  if (a.pin_node1 && syscall(SYS_mbind, pin, pin_len, MPOL_DEFAULT, nullptr, 0, 0) != 0) {
    std::perror("kvtier_pin_hold: mbind default");
    return 1;
  }
  const std::string before = nodes_of(pin, pin_len);
  io_uring ring{};
  int rc = io_uring_queue_init(4, &ring, 0);
  if (rc < 0) {
    std::fprintf(stderr, "kvtier_pin_hold: io_uring_queue_init: %s\n", std::strerror(-rc));
    return 1;
  }
  iovec iov{.iov_base = pin, .iov_len = pin_len};
  rc = io_uring_register_buffers(&ring, &iov, 1);
  if (rc < 0) {
    std::fprintf(stderr, "kvtier_pin_hold: io_uring_register_buffers: %s\n", std::strerror(-rc));
    return 1;
  }
  const std::string after = nodes_of(pin, pin_len);
  std::printf(
      "{\"pid\":%d,\"start\":%llu,\"end\":%llu,\"pin_start\":%llu,\"pin_end\":%llu,"
      "\"pin_nodes_before\":%s,\"pin_nodes_after\":%s}\n",
      getpid(), static_cast<unsigned long long>(reinterpret_cast<std::uint64_t>(buf)),
      static_cast<unsigned long long>(reinterpret_cast<std::uint64_t>(buf) + len),
      static_cast<unsigned long long>(reinterpret_cast<std::uint64_t>(pin)),
      static_cast<unsigned long long>(reinterpret_cast<std::uint64_t>(pin) + pin_len),
      before.c_str(), after.c_str());
  std::fflush(stdout);
  sleep(a.seconds);
  io_uring_unregister_buffers(&ring);
  io_uring_queue_exit(&ring);
  return 0;
}
