#include "agent/loop/dispatcher.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <span>
#include <utility>
#include <vector>

#include "agent/host/clock.hpp"
#include "agent/loop/loop_state.hpp"
#include "agent/loop/pinned_tracker.hpp"
#include "agent/loop/recording.hpp"
#include "agent/loop/target_set.hpp"
#include "agent/movers/mover.hpp"
#include "agent/sources/return_watch.hpp"
#include "agent/telemetry/telemetry.hpp"
#include "policy/types.hpp"

namespace kvtier::agent {

std::vector<std::vector<AddrRange>> in_pieces(std::span<const AddrRange> ranges,
                                              std::uint64_t piece) {
  std::vector<std::vector<AddrRange>> out(1);
  std::uint64_t filled = 0;
  for (const AddrRange& r : ranges) {
    for (std::uint64_t a = r.start; a < r.end;) {
      const AddrRange part{a, std::min(r.end, (a / piece + 1) * piece)};
      if (filled + part.bytes() > piece && filled > 0) {
        out.emplace_back();
        filled = 0;
      }
      out.back().push_back(part);
      filled += part.bytes();
      a = part.end;
    }
  }
  return out;
}

void Dispatcher::dispatch(Mover& mover, const std::vector<PlannedMove>& moves, TimeNs now,
                          Telemetry& telemetry, ReturnWatch* watch) {
  const auto clock = slice_.clock ? slice_.clock : std::function<TimeNs()>(monotonic_now);
  // A mover that moves in the background (DAMOS) gets each group whole, as before.
  const bool sliced = mover.moves_in_call();
  const std::uint64_t piece =
      sliced ? std::max(kHugePageSize, slice_.piece_bytes / kHugePageSize * kHugePageSize)
             : std::numeric_limits<std::uint64_t>::max();
  const TimeNs start = clock();
  std::uint64_t deferred = 0;
  bool moved_any = false;
  std::vector<AddrRange> ranges;
  for (std::size_t i = 0; i < moves.size();) {
    std::size_t j = i;
    ranges.clear();
    const bool promotion = moves[i].reason == MoveReason::kHotPromotion;
    while (j < moves.size() && moves[j].pid == moves[i].pid &&
           moves[j].to_node == moves[i].to_node &&
           (moves[j].reason == MoveReason::kHotPromotion) == promotion) {
      ranges.push_back(moves[j++].range);
    }
    for (const auto& part : in_pieces(ranges, piece)) {
      // At least one piece a dispatch, so a slow node still gets its moves.
      if (sliced && moved_any && clock() - start >= slice_.slice_ns) {
        for (const auto& r : part) deferred += r.bytes();
        continue;
      }
      move(mover, {moves[i].pid, part, moves[i].to_node, !promotion}, now, telemetry, watch);
      moved_any = true;
    }
    i = j;
  }
  if (deferred > 0) {
    telemetry.add("kvtier_move_deferred_bytes_total", {}, static_cast<double>(deferred));
    spdlog::debug("move: {} ms spent, {} bytes of the plan left to the next step",
                  (clock() - start) / 1'000'000, deferred);
  }
  p_.state.budget_bytes = p_.bucket.available();
}

void Dispatcher::move(Mover& mover, const Call& c, TimeNs now, Telemetry& telemetry,
                      ReturnWatch* watch) {
  LoopState& s = p_.state;
  Target* t = s.targets.find(c.pid);
  const std::span<const std::uint64_t> huge = t != nullptr
                                                  ? std::span<const std::uint64_t>(t->huge_blocks)
                                                  : std::span<const std::uint64_t>();
  // The residency phase has just located these pages: the mover need not look again.
  const MoveStats st = mover.move_located(c.pid, c.ranges, c.to_node, huge);
  note_refused(s.targets, mover.take_refused(), now);
  p_.recorder.rec(now, [&] {
    return RecMove{.pid = c.pid,
                   .to_node = c.to_node,
                   .demotion = c.demotion,
                   .ranges = {c.ranges.begin(), c.ranges.end()},
                   .stats = st};
  });
  telemetry.record_moves(st, c.to_node);
  s.moved_total += st;
  s.record_move(now, st.bytes_moved);
  if (st.no_memory > 0 && c.demotion) {
    s.full_node = c.to_node;
    s.full_at = now;
  }
  p_.bucket.consume(std::min(st.bytes_moved, p_.bucket.available()));
  if (t != nullptr) account(*t, c, st, now, telemetry, watch);
  if (st.gone == 0 && st.moved + st.already_there == 0 && st.requested > 0) {
    spdlog::warn(
        "moving {} pages of {} to node {}: none moved (busy {}, pinned {}, no memory {}, "
        "permission {}, partial huge pages {}, errno {})",
        st.requested, c.pid, c.to_node, st.busy, st.pinned, st.no_memory, st.permission,
        st.partial_huge, st.last_errno);
  }
}

// What one mover call changed for its target.
void Dispatcher::account(Target& t, const Call& c, const MoveStats& st, TimeNs now,
                         Telemetry& telemetry, ReturnWatch* watch) {
  t.moved += st;
  if (st.moved == st.requested) {
    // Every page moved: the bytes per node follow without reading them again.
    for (const auto& r : c.ranges) {
      const auto u = t.heat->at(r.start, now);
      const int from = u ? u->node : -1;
      auto& on_from = t.bytes_per_node[from];
      on_from -= std::min(on_from, r.bytes());
      t.bytes_per_node[c.to_node] += r.bytes();
      if (on_from == 0) t.bytes_per_node.erase(from);
    }
  } else {
    // Pages left behind (busy, pinned, a partial huge page...) are not where
    // the heat table will say: the next step reads every page's node again.
    t.last_full_residency = 0;
  }
  for (const auto& r : c.ranges) t.heat->mark_moved(r, c.to_node, now, c.demotion);
  // Demoted: its first touch wakes the promotion tick. Promoted: no longer watched.
  if (watch != nullptr) {
    if (c.demotion && st.moved > 0) {
      watch->arm(c.pid, c.ranges);
    } else if (!c.demotion) {
      watch->disarm(c.pid, c.ranges);
    }
  }
  p_.feedback.moved(t, c.ranges, c.demotion, st.bytes_moved, now, telemetry);
}

}  // namespace kvtier::agent
