#pragma once
// kvtierd's own memory. It lives in the DRAM node it keeps for the workload, so
// what it keeps beyond its working set is taken from the workload's hot pages.

#include <cstdint>

namespace kvtier::agent {

// Makes the C library give freed memory back to the kernel at once (call it
// before any thread starts): blocks of 1 MiB and more are mapped on their own and
// unmapped when freed, and the heap is trimmed when more than 4 MiB at its top is
// free. Without it, glibc raises both thresholds to the largest block freed so
// far, and kvtierd kept its steps' transient vectors mapped for good (13 MiB in
// the benchmark guest). Lower thresholds cost CPU: a step's vectors of a few
// hundred KiB were mapped and faulted in again at every step. False when the C
// library refused (another allocator).
bool return_freed_memory_promptly();

// This process's resident memory in bytes (/proc/self/statm), 0 if unreadable.
std::uint64_t resident_bytes();

}  // namespace kvtier::agent
