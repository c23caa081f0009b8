#include "agent/host/self_memory.hpp"

#include <malloc.h>
#include <unistd.h>

#include <fstream>

namespace kvtier::agent {

namespace {
constexpr int kMmapThreshold = 1024 * 1024;
constexpr int kTrimThreshold = 4 * 1024 * 1024;
}  // namespace

// Called once at start, before kvtierd starts a thread.
bool return_freed_memory_promptly() {
  // Setting either threshold also stops glibc's dynamic adjustment of both.
  const bool mmap_ok =
      mallopt(M_MMAP_THRESHOLD, kMmapThreshold) == 1;  // NOLINT(concurrency-mt-unsafe)
  const bool trim_ok =
      mallopt(M_TRIM_THRESHOLD, kTrimThreshold) == 1;  // NOLINT(concurrency-mt-unsafe)
  return mmap_ok && trim_ok;
}

std::uint64_t resident_bytes() {
  std::ifstream statm("/proc/self/statm");
  std::uint64_t size = 0;
  std::uint64_t resident = 0;
  if (!(statm >> size >> resident)) return 0;
  const long page = sysconf(_SC_PAGESIZE);
  return page > 0 ? resident * static_cast<std::uint64_t>(page) : 0;
}

}  // namespace kvtier::agent
