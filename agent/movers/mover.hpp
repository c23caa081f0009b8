#pragma once
// The interface every way of moving pages implements (batched move_pages,
// DAMOS schemes, dry run). Movers never copy data themselves: the kernel moves
// each page and its mapping at once. The migration budget is the caller's
// (the control loop's token bucket): a mover moves what it is given at once.

#include <cstdint>
#include <span>
#include <string_view>
#include <utility>
#include <vector>

#include "policy/types.hpp"

namespace kvtier::agent {

class Mover {
 public:
  virtual ~Mover() = default;
  Mover() = default;
  Mover(const Mover&) = delete;
  Mover& operator=(const Mover&) = delete;

  [[nodiscard]] virtual std::string_view name() const = 0;
  // Moves the pages of `pid` in `ranges` to `to_node`, classifying every page's
  // outcome. Never throws; a process that exits mid-call shows up as `gone`.
  // The mover first looks where the pages are and which are huge.
  virtual MoveStats move(Pid pid, std::span<const AddrRange> ranges, int to_node) = 0;
  // The same for a caller that has just read where the pages are (the control
  // loop's residency phase, ResidencyReader::map): the ranges lie on another
  // node than `to_node`, and `huge_blocks` (sorted) are the 2 MiB blocks a huge
  // folio backs. A mover may skip its own first look; a huge page the ranges
  // cover only partly is not moved (moving its head would move all of it).
  virtual MoveStats move_located(Pid pid, std::span<const AddrRange> ranges, int to_node,
                                 std::span<const std::uint64_t> huge_blocks) {
    (void)huge_blocks;
    return move(pid, ranges, to_node);
  }
  // The pages it found long-term pinned since the last call (MoveStats::pinned,
  // by address): refused on every attempt, or skipped as refused before. The
  // control loop keeps them out of its plans (policy/pinned.hpp).
  virtual std::vector<std::pair<Pid, AddrRange>> take_refused() { return {}; }
  // True when move() moves the given pages before it returns, so the caller may
  // hand them over a piece at a time; false for a mover that only reports what
  // the kernel did in the background since its last call (DAMOS).
  [[nodiscard]] virtual bool moves_in_call() const { return true; }
};

}  // namespace kvtier::agent
