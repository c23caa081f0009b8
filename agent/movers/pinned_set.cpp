#include "agent/movers/pinned_set.hpp"

#include <cstddef>
#include <cstdint>
#include <iterator>
#include <limits>

#include "policy/types.hpp"

namespace kvtier::agent {

void PinnedSet::mark(Pid pid, std::uint64_t page, TimeNs now) {
  marked_[{pid, page}] = now;
}

bool PinnedSet::contains(Pid pid, std::uint64_t page, TimeNs now) {
  auto it = marked_.find({pid, page});
  if (it == marked_.end()) return false;
  if (now - it->second >= ttl_) {
    marked_.erase(it);
    return false;
  }
  return true;
}

void PinnedSet::forget(Pid pid) {
  marked_.erase(marked_.lower_bound({pid, 0}),
                marked_.upper_bound({pid, std::numeric_limits<std::uint64_t>::max()}));
}

std::size_t PinnedSet::count(Pid pid) const {
  return static_cast<std::size_t>(
      std::distance(marked_.lower_bound({pid, 0}),
                    marked_.upper_bound({pid, std::numeric_limits<std::uint64_t>::max()})));
}

}  // namespace kvtier::agent
