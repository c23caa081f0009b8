#pragma once
// The move phase: a plan's moves to the mover, and the accounting of each call:
// the recording, telemetry, the token bucket, the loop's totals and a full
// slow node, the target's bytes per node and heat table, the return watch, and
// the group's feedback.

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "agent/loop/feedback.hpp"
#include "agent/loop/loop_state.hpp"
#include "agent/loop/recorder.hpp"
#include "agent/movers/mover.hpp"
#include "agent/sources/return_watch.hpp"
#include "agent/telemetry/telemetry.hpp"
#include "policy/budget.hpp"

namespace kvtier::agent {

// How a dispatch is sliced (ControllerDeps: move_piece_bytes, move_slice_ns, move_clock).
struct DispatchSlice {
  std::uint64_t piece_bytes = 4ULL << 20;
  TimeNs slice_ns = 500'000'000;
  std::function<TimeNs()> clock;  // null: monotonic
};

// `ranges` in pieces of at most `piece` bytes (a multiple of 2 MiB): each range
// cut at the multiples of `piece`, so a huge page is never cut, then packed.
std::vector<std::vector<AddrRange>> in_pieces(std::span<const AddrRange> ranges,
                                              std::uint64_t piece);

class Dispatcher {
 public:
  struct Parts {
    LoopState& state;
    policy::TokenBucket& bucket;
    Recorder& recorder;
    Feedback& feedback;
  };
  Dispatcher(Parts parts, DispatchSlice slice) : p_(parts), slice_(std::move(slice)) {}
  // Consecutive moves of one target to one node go to `mover` together, a piece
  // at a time, until the slice of move time is spent; the rest is left to the
  // next step. `watch` (null: none) is armed on what is demoted and disarmed on
  // what is promoted.
  void dispatch(Mover& mover, const std::vector<PlannedMove>& moves, TimeNs now,
                Telemetry& telemetry, ReturnWatch* watch);

 private:
  struct Call {
    Pid pid;
    std::span<const AddrRange> ranges;
    int to_node;
    bool demotion;
  };
  void move(Mover& mover, const Call& c, TimeNs now, Telemetry& telemetry, ReturnWatch* watch);
  void account(Target& t, const Call& c, const MoveStats& st, TimeNs now, Telemetry& telemetry,
               ReturnWatch* watch);

  Parts p_;
  DispatchSlice slice_;
};

}  // namespace kvtier::agent
