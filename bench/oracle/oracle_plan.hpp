#pragma once
// The oracle's decision, pure: given kvsim's ground truth (each block's last access) and where
// each block's pages are, which blocks to move this cycle. Hot = touched within the cold age,
// cold = not (kvsim's own rule: cold once now - last_access >= cold_age). Hot blocks belong on
// the fast node, cold ones on the slow node; the budget and the fast node's free room bound
// what moves:
//   1. demote cold blocks, coldest first, as far as promotions need room;
//   2. promote hot blocks, most recently touched first, while budget and room last;
//   3. demote the remaining cold blocks, coldest first, while budget lasts.
// Whole blocks only, in that order; the first block that does not fit stops its step.

#include <cstdint>
#include <span>
#include <vector>

#include "policy/types.hpp"

namespace kvtier::bench {

struct OracleBlock {
  TimeNs last_access = 0;
  std::uint32_t pages_fast = 0;  // pages on the fast (DRAM) node
  std::uint32_t pages_slow = 0;  // pages on the slow (CXL) node
};

struct OracleLimits {
  TimeNs now = 0;
  TimeNs cold_age_ns = 0;
  std::uint64_t budget_bytes = 0;     // what may move this cycle, both ways together
  std::uint64_t fast_room_bytes = 0;  // free memory on the fast node above its floor
  std::uint64_t page_bytes = kPageSize;
};

struct OracleMove {
  std::uint32_t block = 0;
  bool to_fast = false;
  std::uint64_t bytes = 0;  // of the block's pages now on the other node
};

struct OraclePlan {
  std::vector<OracleMove> moves;  // in the order to execute them
  std::uint64_t hot_blocks = 0;
  std::uint64_t cold_blocks = 0;
  std::uint64_t misplaced_hot_bytes = 0;   // hot bytes on the slow node
  std::uint64_t misplaced_cold_bytes = 0;  // cold bytes on the fast node
  std::uint64_t promote_bytes = 0;         // planned
  std::uint64_t demote_bytes = 0;
  bool budget_limited = false;  // something misplaced was left for want of budget
  bool room_limited = false;    // a promotion was left for want of room on the fast node

  // What stays misplaced after the plan runs as planned.
  [[nodiscard]] std::uint64_t backlog_bytes() const {
    return misplaced_hot_bytes + misplaced_cold_bytes - promote_bytes - demote_bytes;
  }
};

[[nodiscard]] bool oracle_is_cold(TimeNs last_access, TimeNs now, TimeNs cold_age_ns);

OraclePlan plan_oracle(std::span<const OracleBlock> blocks, const OracleLimits& limits);

}  // namespace kvtier::bench
