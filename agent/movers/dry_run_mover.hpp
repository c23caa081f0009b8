#pragma once
// A mover that only looks: it locates every page (a move_pages status query)
// and counts what a real mover would do, moving nothing. Its `moved` and
// `bytes_moved` mean "would move".

#include "agent/host/move_pages_call.hpp"
#include "agent/host/residency.hpp"
#include "agent/movers/mover.hpp"

namespace kvtier::agent {

class DryRunMover final : public Mover {
 public:
  explicit DryRunMover(MovePagesFn query = system_move_pages(), HostPaths host = {});

  [[nodiscard]] std::string_view name() const override { return "dry_run"; }
  MoveStats move(Pid pid, std::span<const AddrRange> ranges, int to_node) override;

 private:
  ResidencyReader reader_;
  HostPaths host_;
};

}  // namespace kvtier::agent
