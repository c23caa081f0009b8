#pragma once
// Checks of real kernel facilities, each answering "can this run here, and if
// not, why" in one line. File checks go through HostPaths so unit tests run
// them on fixture trees; capability checks ask the kernel (capget).

#include <string_view>

#include "agent/host/availability.hpp"
#include "agent/host/host_paths.hpp"
#include "policy/error.hpp"

namespace kvtier::agent {

// CO-RE needs the kernel's own BTF.
Availability probe_btf(const HostPaths& paths);

// BPF programs that read kernel memory (bpf_probe_read_kernel, BPF_CORE_READ)
// do not load under the kernel's lockdown mode "confidentiality"
// (/sys/kernel/security/lockdown; LOCKDOWN_BPF_READ_KERNEL): the verifier
// does not know the helper. `what` names the programs in the answer.
Availability probe_bpf_kernel_reads(const HostPaths& paths, std::string_view what);

// Loading tracing/perf_event programs needs CAP_BPF and CAP_PERFMON (or
// CAP_SYS_ADMIN) in the effective set.
Availability probe_bpf_privileges();
bool has_effective_capability(int cap);

// A tracepoint exists: in tracefs when it is mounted, else in the kernel's
// BTF (every tracepoint has a btf_trace_<event> typedef), which is all a raw
// tracepoint program needs.
Availability probe_tracepoint(const HostPaths& paths, std::string_view category,
                              std::string_view event);

// How many arguments the tracepoint passes (its TP_PROTO), from kernel BTF.
Result<int> tracepoint_arg_count(const HostPaths& paths, std::string_view event);

// DAMON sysfs with the vaddr operations set.
Availability probe_damon_vaddr(const HostPaths& paths);

// /sys/kernel/mm/page_idle/bitmap and a /proc/PID/pagemap that shows PFNs.
Availability probe_page_idle(const HostPaths& paths);

}  // namespace kvtier::agent
