// What the guest's CPU did while a request was in flight (issue 38: where the clients' time
// goes): the server's threads' CPU time and run delay (/proc/PID/task/*/schedstat), a watched
// process's CPU (kvtierd), the load generator's own, the whole CPU's busy, idle, system and
// softirq time (/proc/stat) and the kernel's NUMA and migration counters (/proc/vmstat). A
// snapshot at a request's send and one at its answer give the request's window.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

namespace kvtier::bench::loadgen {

// One task's /proc/.../schedstat: time on a CPU, time runnable but waiting for one, slices.
struct TaskTimes {
  std::uint64_t cpu_ns = 0;
  std::uint64_t delay_ns = 0;
  std::uint64_t slices = 0;
};
[[nodiscard]] std::optional<TaskTimes> parse_schedstat(std::string_view text);

// The first ("cpu ") line of /proc/stat, in USER_HZ ticks.
struct CpuTicks {
  std::uint64_t user = 0, nice = 0, system = 0, idle = 0, iowait = 0, irq = 0, softirq = 0;
  [[nodiscard]] std::uint64_t busy() const { return user + nice + system + irq + softirq; }
};
[[nodiscard]] std::optional<CpuTicks> parse_proc_stat(std::string_view text);

// The /proc/vmstat counters named in kVmKeys that the kernel has (others are left out).
[[nodiscard]] std::map<std::string, std::uint64_t> parse_vmstat(std::string_view text);

struct ProcSnapshot {
  bool server_ok = false;
  TaskTimes server;  // all of the server's threads, summed
  bool watch_ok = false;
  TaskTimes watch;  // all of the watched process's threads (kvtierd), summed
  TaskTimes self;   // the load generator's threads
  CpuTicks cpu;
  std::map<std::string, std::uint64_t> vm;
};

// Reads /proc for the server (pid), the watched process (watch_pid, 0: none) and this process.
[[nodiscard]] ProcSnapshot take_snapshot(int pid, int watch_pid);

// The window from a to b as a JSON object: server_cpu_ms, server_delay_ms, watch_cpu_ms
// (absent without a watched process, or if it was gone), self_cpu_ms, busy_ms, idle_ms,
// system_ms, softirq_ms (ticks converted with clk_tck) and vm: {counter: increase}.
[[nodiscard]] nlohmann::json window_json(const ProcSnapshot& a, const ProcSnapshot& b,
                                         long clk_tck);

}  // namespace kvtier::bench::loadgen
