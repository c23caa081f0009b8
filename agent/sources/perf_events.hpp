#pragma once
// The perf events the PMU sampler can take samples from, best first: Intel
// PEBS load latency (cpu/mem-loads/), AMD IBS op (ibs_op//), and the software
// page-faults event that runs the same BPF program on any machine. Hardware
// event encodings are read from sysfs (events/ and format/ of the PMU), not
// hard-coded, so they are right for the CPU at hand.

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "agent/host/host_paths.hpp"
#include "policy/error.hpp"

namespace kvtier::agent {

enum class PmuEventKind : std::uint8_t {
  kPebsLoadLatency,
  kIbsOp,
  kSoftwarePageFaults,
};

std::string_view to_string(PmuEventKind k);

struct PmuEventSpec {
  PmuEventKind kind = PmuEventKind::kSoftwarePageFaults;
  std::string name;  // as perf(1) spells it, for messages
  std::uint32_t type = 0;
  std::uint64_t config = 0;
  std::uint64_t config1 = 0;
  std::uint64_t config2 = 0;
  std::uint8_t precise_ip = 0;
  bool exclude_kernel = false;
};

// Encodes "event=0xcd,umask=0x1,ldlat=3" (a sysfs events/ file) with the PMU's
// format/ files; `overrides` (same syntax) replaces or adds terms.
Result<PmuEventSpec> encode_pmu_event(const HostPaths& paths, std::string_view pmu,
                                      std::string_view event_terms, std::string_view overrides);

// The hardware events this machine's sysfs describes (PEBS load latency on
// cpu or cpu_core, IBS op), in preference order. Does not open them.
std::vector<PmuEventSpec> hardware_event_candidates(const HostPaths& paths,
                                                    std::uint32_t load_latency_cycles);

PmuEventSpec software_page_faults_event();

// Opens the event system-wide on one CPU and closes it: the only real test of
// whether the PMU, the kernel and our privileges allow it.
Result<void> try_open_event(const PmuEventSpec& spec, std::uint64_t sample_period, int cpu);

// One sampling perf event per CPU; file descriptors are handed to libbpf links,
// which close them, so this class only keeps the numbers for ioctls.
struct PerfEventFds {
  std::vector<int> fds;
  std::vector<int> cpus;
};
Result<PerfEventFds> open_event_per_cpu(const PmuEventSpec& spec, std::uint64_t sample_period,
                                        const std::vector<int>& cpus);
Result<void> set_sample_period(const PerfEventFds& set, std::uint64_t period);

Result<std::vector<int>> online_cpus(const HostPaths& paths);

}  // namespace kvtier::agent
