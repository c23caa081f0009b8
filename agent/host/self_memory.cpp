#include "agent/host/self_memory.hpp"

#include <malloc.h>
#include <unistd.h>

#include <string_view>

#include "agent/host/sysfs.hpp"

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
  // "size resident shared text lib data dt", in pages.
  auto statm = read_text("/proc/self/statm");
  if (!statm) return 0;
  std::string_view rest = *statm;
  const std::size_t sp = rest.find(' ');
  if (sp == std::string_view::npos) return 0;
  rest.remove_prefix(sp + 1);
  auto resident = parse_u64(rest.substr(0, rest.find(' ')), "/proc/self/statm");
  const long page = sysconf(_SC_PAGESIZE);
  return resident && page > 0 ? *resident * static_cast<std::uint64_t>(page) : 0;
}

}  // namespace kvtier::agent
