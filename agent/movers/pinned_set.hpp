#pragma once
// Pages the kernel refused to migrate on every attempt: long-term pinned
// buffers (io_uring registered buffers, RDMA or GPU-pinned host memory) hold an
// extra reference, so migration fails however often it is retried. They are
// remembered and skipped until `ttl` passes, in case the pin is released.

#include <cstddef>
#include <cstdint>
#include <map>
#include <utility>

#include "policy/types.hpp"

namespace kvtier::agent {

class PinnedSet {
 public:
  explicit PinnedSet(TimeNs ttl) : ttl_(ttl) {}

  void mark(Pid pid, std::uint64_t page, TimeNs now);
  // True while the mark is younger than ttl; an expired mark is dropped.
  bool contains(Pid pid, std::uint64_t page, TimeNs now);
  // The process exited: its pid may be reused by another.
  void forget(Pid pid);
  [[nodiscard]] std::size_t size() const { return marked_.size(); }
  [[nodiscard]] std::size_t count(Pid pid) const;

 private:
  TimeNs ttl_;
  std::map<std::pair<Pid, std::uint64_t>, TimeNs> marked_;
};

}  // namespace kvtier::agent
