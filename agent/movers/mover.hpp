#pragma once
// The interface every way of moving pages implements (batched move_pages,
// DAMOS schemes, dry run). Movers never copy data themselves: the kernel moves
// each page and its mapping at once.

#include <span>
#include <string_view>

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
  virtual MoveStats move(Pid pid, std::span<const AddrRange> ranges, int to_node) = 0;
};

}  // namespace kvtier::agent
