#include "agent/movers/node_full_latch.hpp"
#include "policy/types.hpp"

namespace kvtier::agent {

bool NodeFullLatch::latch(int node, TimeNs now) {
  const bool fresh = !is_full(node, now);
  if (fresh) since_[node] = now;
  return fresh;
}

bool NodeFullLatch::is_full(int node, TimeNs now) {
  auto it = since_.find(node);
  if (it == since_.end()) return false;
  if (now - it->second >= retry_after_) {
    since_.erase(it);
    return false;
  }
  return true;
}

}  // namespace kvtier::agent
