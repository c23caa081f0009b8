#include "bench/oracle/oracle_plan.hpp"

#include <algorithm>

namespace kvtier::bench {

bool oracle_is_cold(TimeNs last_access, TimeNs now, TimeNs cold_age_ns) {
  return now >= last_access && now - last_access >= cold_age_ns;
}

OraclePlan plan_oracle(std::span<const OracleBlock> blocks, const OracleLimits& limits) {
  OraclePlan plan;
  std::vector<std::uint32_t> promote;  // hot blocks with pages on the slow node
  std::vector<std::uint32_t> demote;   // cold blocks with pages on the fast node
  for (std::uint32_t b = 0; b < blocks.size(); ++b) {
    const OracleBlock& k = blocks[b];
    if (oracle_is_cold(k.last_access, limits.now, limits.cold_age_ns)) {
      ++plan.cold_blocks;
      if (k.pages_fast > 0) {
        demote.push_back(b);
        plan.misplaced_cold_bytes += k.pages_fast * limits.page_bytes;
      }
    } else {
      ++plan.hot_blocks;
      if (k.pages_slow > 0) {
        promote.push_back(b);
        plan.misplaced_hot_bytes += k.pages_slow * limits.page_bytes;
      }
    }
  }
  // Most recently touched first for promotion, least recently for demotion; ties by block id,
  // so the plan is the same for the same input.
  std::ranges::sort(promote, [&](std::uint32_t a, std::uint32_t b) {
    return blocks[a].last_access != blocks[b].last_access
               ? blocks[a].last_access > blocks[b].last_access
               : a < b;
  });
  std::ranges::sort(demote, [&](std::uint32_t a, std::uint32_t b) {
    return blocks[a].last_access != blocks[b].last_access
               ? blocks[a].last_access < blocks[b].last_access
               : a < b;
  });

  std::uint64_t budget = limits.budget_bytes;
  std::uint64_t room = limits.fast_room_bytes;
  std::size_t next_demote = 0;
  // One demotion, if the budget allows it; it frees room on the fast node.
  const auto demote_one = [&]() {
    const std::uint32_t b = demote[next_demote];
    const std::uint64_t bytes = blocks[b].pages_fast * limits.page_bytes;
    if (bytes > budget) {
      plan.budget_limited = true;
      return false;
    }
    plan.moves.push_back(OracleMove{.block = b, .to_fast = false, .bytes = bytes});
    plan.demote_bytes += bytes;
    budget -= bytes;
    room += bytes;
    ++next_demote;
    return true;
  };

  // 1. Room for the promotions.
  std::uint64_t need = plan.misplaced_hot_bytes > room ? plan.misplaced_hot_bytes - room : 0;
  while (need > 0 && next_demote < demote.size()) {
    const std::uint64_t before = plan.demote_bytes;
    if (!demote_one()) break;
    need -= std::min(need, plan.demote_bytes - before);
  }
  // 2. Promotions.
  for (std::uint32_t b : promote) {
    const std::uint64_t bytes = blocks[b].pages_slow * limits.page_bytes;
    if (bytes > budget) {
      plan.budget_limited = true;
      break;
    }
    if (bytes > room) {
      plan.room_limited = true;
      break;
    }
    plan.moves.push_back(OracleMove{.block = b, .to_fast = true, .bytes = bytes});
    plan.promote_bytes += bytes;
    budget -= bytes;
    room -= bytes;
  }
  // 3. The remaining demotions.
  while (next_demote < demote.size() && demote_one()) {
  }
  return plan;
}

}  // namespace kvtier::bench
