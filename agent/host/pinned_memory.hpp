#pragma once
// What the kernel shows of a process's long-term pinned memory (FOLL_LONGTERM
// pins: io_uring registered buffers, RDMA registrations, cudaHostRegister):
//   - /proc/PID/status `VmPin`: the bytes pinned and charged to the mm
//     (mm->pinned_vm: io_uring and RDMA charge it, the NVIDIA driver does not),
//     a total without addresses;
//   - /proc/PID/fdinfo/FD of an io_uring file: under `UserBufs:` one line per
//     registered buffer, "INDEX: 0xADDR/LEN", the ranges themselves (printed
//     only while the ring's lock is free at the read: a busy ring shows none).
// docs/gpu-servers.md lists what each kernel version shows.

#include <cstdint>
#include <map>
#include <optional>
#include <string_view>
#include <vector>

#include "agent/host/host_paths.hpp"
#include "policy/error.hpp"
#include "policy/types.hpp"

namespace kvtier::agent {

struct PinnedMemory {
  std::optional<std::uint64_t> vm_pin_bytes;  // nullopt: the kernel has no VmPin line
  std::vector<AddrRange> registered;          // io_uring buffers, page-aligned outwards
  std::uint32_t io_urings = 0;                // io_uring files the process holds
};

// The `VmPin:` line of /proc/PID/status, in bytes.
std::optional<std::uint64_t> parse_status_vm_pin(std::string_view status);
// The registered buffers of an io_uring fdinfo text, page-aligned outwards;
// `what` names the file in errors ("FILE: malformed UserBufs line '...'").
Result<std::vector<AddrRange>> parse_io_uring_buffers(std::string_view fdinfo,
                                                      std::string_view what);
// Both for one process: ESRCH when it is gone. An fd closed mid-read is skipped.
Result<PinnedMemory> read_pinned_memory(const HostPaths& paths, Pid pid);

// /proc/zoneinfo -> node id -> bytes its ZONE_MOVABLE manages (nodes without
// any left out). A long-term pin migrates pages out of that zone first.
std::map<int, std::uint64_t> parse_movable_zones(std::string_view zoneinfo);
// The same from HostPaths' /proc/zoneinfo; empty when it cannot be read.
std::map<int, std::uint64_t> read_movable_zones(const HostPaths& paths);

}  // namespace kvtier::agent
