#pragma once
// CPU time the kernel spends in BPF programs: run_time_ns and run_cnt from
// bpf_prog_info, which the kernel counts only while run-time stats are on
// (kernel.bpf_stats_enabled, or a BPF_ENABLE_STATS fd held open).

#include <cstdint>
#include <span>
#include <string>

#include "policy/error.hpp"

namespace kvtier::agent {

struct BpfProgStats {
  std::string name;
  std::uint64_t run_time_ns = 0;
  std::uint64_t run_cnt = 0;
};

Result<BpfProgStats> read_prog_stats(int prog_fd);
// Sum over several programs.
Result<BpfProgStats> sum_prog_stats(std::span<const int> prog_fds);

// Turns run-time stats on for as long as it lives (BPF_ENABLE_STATS).
class BpfRunTimeStats {
 public:
  BpfRunTimeStats() = default;
  ~BpfRunTimeStats();
  BpfRunTimeStats(const BpfRunTimeStats&) = delete;
  BpfRunTimeStats& operator=(const BpfRunTimeStats&) = delete;
  Result<void> enable();

 private:
  int fd_ = -1;
};

}  // namespace kvtier::agent
