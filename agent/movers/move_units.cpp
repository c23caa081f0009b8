#include "agent/movers/move_units.hpp"

#include <algorithm>
#include <cstdint>
#include <span>
#include <vector>

#include "policy/types.hpp"

namespace kvtier::agent {
namespace {

std::uint64_t align_down(std::uint64_t v, std::uint64_t a) {
  return v & ~(a - 1);
}
std::uint64_t align_up(std::uint64_t v, std::uint64_t a) {
  return (v + a - 1) & ~(a - 1);
}

}  // namespace

std::uint64_t count_pages(std::span<const AddrRange> ranges) {
  std::uint64_t n = 0;
  for (const auto& r : ranges) {
    if (r.end <= r.start) continue;
    n += (align_up(r.end, kPageSize) - align_down(r.start, kPageSize)) / kPageSize;
  }
  return n;
}

std::vector<MoveUnit> split_units(std::span<const AddrRange> ranges,
                                  std::span<const std::uint64_t> huge_blocks, PartialHuge partial,
                                  std::uint64_t* skipped) {
  std::vector<MoveUnit> units;
  units.reserve(count_pages(ranges));
  for (const auto& r : ranges) {
    if (r.end <= r.start) continue;
    std::uint64_t a = align_down(r.start, kPageSize);
    const std::uint64_t end = align_up(r.end, kPageSize);
    while (a < end) {
      const std::uint64_t block = align_down(a, kHugePageSize);
      if (!std::binary_search(huge_blocks.begin(), huge_blocks.end(), block)) {
        units.push_back(MoveUnit{.addr = a, .pages = 1});
        a += kPageSize;
        continue;
      }
      const std::uint64_t stop = std::min(end, block + kHugePageSize);
      const auto pages = static_cast<std::uint32_t>((stop - a) / kPageSize);
      const bool whole = a == block && stop == block + kHugePageSize;
      if (whole || partial == PartialHuge::kWhole) {
        units.push_back(MoveUnit{.addr = block, .pages = pages});
      } else if (skipped != nullptr) {
        *skipped += pages;
      }
      a = stop;
    }
  }
  return units;
}

}  // namespace kvtier::agent
