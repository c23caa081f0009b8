#include "agent/host/huge_pages.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "agent/host/unique_fd.hpp"
#include "policy/error.hpp"
#include "policy/types.hpp"

namespace kvtier::agent {
namespace {

constexpr std::uint64_t kPagesPerHuge = kHugePageSize / kPageSize;
constexpr std::uint64_t kPfnMask = (1ULL << 55) - 1;
constexpr std::uint64_t kPresent = 1ULL << 63;
// include/uapi/linux/kernel-page-flags.h
constexpr std::uint64_t kKpfCompoundHead = 1ULL << 15;
constexpr std::uint64_t kKpfHuge = 1ULL << 17;
constexpr std::uint64_t kKpfThp = 1ULL << 22;

std::uint64_t align_down(std::uint64_t v, std::uint64_t a) {
  return v & ~(a - 1);
}

// One 64-bit word at index `index` of a pagemap-style file; 0 if unreadable.
std::uint64_t read_word(int fd, std::uint64_t index) {
  std::uint64_t word = 0;
  const auto off = static_cast<off_t>(index * sizeof word);
  if (::pread(fd, &word, sizeof word, off) != static_cast<ssize_t>(sizeof word)) return 0;
  return word;
}

}  // namespace

Result<std::vector<std::uint64_t>> KpageflagsHugeProbe::huge_blocks(Pid pid, AddrRange range) {
  const auto pagemap_path = host_.proc / std::to_string(pid) / "pagemap";
  const auto flags_path = host_.proc / "kpageflags";
  const UniqueFd pagemap(::open(pagemap_path.c_str(), O_RDONLY | O_CLOEXEC));
  if (pagemap.get() < 0) {
    const int err = errno;
    return fail(fmt::format("{}: cannot open: {}", pagemap_path.string(), errno_text(err)), err);
  }
  const UniqueFd flags(::open(flags_path.c_str(), O_RDONLY | O_CLOEXEC));
  if (flags.get() < 0) {
    const int err = errno;
    return fail(fmt::format("{}: cannot open: {} (huge pages will be moved page by page)",
                            flags_path.string(), errno_text(err)),
                err);
  }
  std::vector<std::uint64_t> blocks;
  for (std::uint64_t b = align_down(range.start, kHugePageSize); b < range.end;
       b += kHugePageSize) {
    const std::uint64_t first = read_word(pagemap.get(), b / kPageSize);
    if ((first & kPresent) == 0) continue;
    const std::uint64_t pfn = first & kPfnMask;
    if (pfn == 0 || pfn % kPagesPerHuge != 0) continue;
    const std::uint64_t kflags = read_word(flags.get(), pfn);
    if ((kflags & kKpfCompoundHead) == 0 || (kflags & (kKpfThp | kKpfHuge)) == 0) continue;
    // A head of a smaller (multi-size THP) folio, or a PTE-mapped THP partly
    // unmapped, does not reach the block's last page.
    const std::uint64_t last = read_word(pagemap.get(), b / kPageSize + kPagesPerHuge - 1);
    if ((last & kPresent) == 0 || (last & kPfnMask) != pfn + kPagesPerHuge - 1) continue;
    blocks.push_back(b);
  }
  return blocks;
}

}  // namespace kvtier::agent
