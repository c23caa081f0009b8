#include "agent/sources/bpf_stats.hpp"

#include <bpf/bpf.h>
#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <span>
#include <string>

#include "policy/error.hpp"

namespace kvtier::agent {

Result<BpfProgStats> read_prog_stats(int prog_fd) {
  bpf_prog_info info{};
  __u32 len = sizeof(info);
  if (bpf_obj_get_info_by_fd(prog_fd, &info, &len) != 0) {
    const int err = errno;
    return fail(fmt::format("bpf_obj_get_info_by_fd({}): {}", prog_fd, errno_text(err)), err);
  }
  return BpfProgStats{
      .name = std::string(info.name), .run_time_ns = info.run_time_ns, .run_cnt = info.run_cnt};
}

Result<BpfProgStats> sum_prog_stats(std::span<const int> prog_fds) {
  BpfProgStats total{.name = "total"};
  for (const int fd : prog_fds) {
    auto s = read_prog_stats(fd);
    if (!s) return s;
    total.run_time_ns += s->run_time_ns;
    total.run_cnt += s->run_cnt;
  }
  return total;
}

BpfRunTimeStats::~BpfRunTimeStats() {
  if (fd_ >= 0) close(fd_);
}

Result<void> BpfRunTimeStats::enable() {
  if (fd_ >= 0) return {};
  fd_ = bpf_enable_stats(BPF_STATS_RUN_TIME);
  if (fd_ < 0) {
    const int err = errno;
    return fail(fmt::format("BPF_ENABLE_STATS: {} (needs CAP_SYS_ADMIN)", errno_text(err)), err);
  }
  return {};
}

}  // namespace kvtier::agent
