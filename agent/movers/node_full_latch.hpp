#pragma once
// Once a target node reports ENOMEM, further demotion to it only burns CPU on
// failed allocations, so it stops until `retry_after` passes or someone clears
// the latch (for example after the node's free memory was seen to grow).

#include <map>

#include "policy/types.hpp"

namespace kvtier::agent {

class NodeFullLatch {
 public:
  explicit NodeFullLatch(TimeNs retry_after) : retry_after_(retry_after) {}

  // Returns true when the node was not latched before (time to warn).
  bool latch(int node, TimeNs now);
  // True while latched; expires after retry_after.
  bool is_full(int node, TimeNs now);
  void clear(int node) { since_.erase(node); }

 private:
  TimeNs retry_after_;
  std::map<int, TimeNs> since_;
};

}  // namespace kvtier::agent
