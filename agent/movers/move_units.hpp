#pragma once
// Transparent huge pages are moved whole: move_pages on the head address moves
// the 2 MiB folio at once, while passing its 512 small addresses isolates it at
// the first and reports the other 511 as busy. So ranges are cut into move
// units first: one unit per 2 MiB block backed by a huge folio, one per small
// page elsewhere.

#include <cstdint>
#include <span>
#include <vector>

#include "policy/types.hpp"

namespace kvtier::agent {

// One address handed to move_pages, standing for `pages` small pages.
struct MoveUnit {
  std::uint64_t addr = 0;
  std::uint32_t pages = 1;
  friend bool operator==(const MoveUnit&, const MoveUnit&) = default;
};

// What to do with a huge block a range covers only partly.
enum class PartialHuge : std::uint8_t {
  kWhole,  // one unit counting only the covered pages (the kernel moves the whole folio)
  kSkip,   // no unit: its covered pages are counted in `skipped`
};

// Page-aligns each range (start down, end up) and cuts it into units.
std::vector<MoveUnit> split_units(std::span<const AddrRange> ranges,
                                  std::span<const std::uint64_t> huge_blocks,
                                  PartialHuge partial = PartialHuge::kWhole,
                                  std::uint64_t* skipped = nullptr);

// Pages in the page-aligned ranges.
std::uint64_t count_pages(std::span<const AddrRange> ranges);

}  // namespace kvtier::agent
