#pragma once
// The prefix cache of an inference server, keyed by Mooncake hash ids: each id names a
// 512-token prefix block, held as a group of KV blocks. Groups in use by a running sequence
// are referenced and never evicted; when the last reference goes the group stays cached (so
// a later request with the same prefix reuses it) and becomes the most recently used
// candidate for eviction. Eviction takes the least recently used unreferenced group.

#include <cstdint>
#include <list>
#include <optional>
#include <unordered_map>
#include <vector>

#include "bench/kvsim/block_allocator.hpp"

namespace kvtier::bench {

struct CachedPrefix {
  std::vector<BlockId> blocks;
  std::uint32_t tokens = 0;  // simulated tokens held (a request's last hash block may be partial)
  std::uint32_t refs = 0;
};

struct EvictedPrefix {
  std::uint64_t hash = 0;
  std::vector<BlockId> blocks;
};

class PrefixCache {
 public:
  [[nodiscard]] const CachedPrefix* find(std::uint64_t hash) const;
  // Takes a reference; the group stops being evictable. False if absent.
  bool acquire(std::uint64_t hash);
  // Drops a reference; the last one makes the group evictable, most recently used.
  // False if absent or not referenced.
  bool release(std::uint64_t hash);
  // A group just written by a sequence, which holds the first reference. False (and nothing
  // stored) if the hash is already cached.
  bool insert(std::uint64_t hash, std::vector<BlockId> blocks, std::uint32_t tokens);
  // The least recently used unreferenced group, removed from the cache.
  std::optional<EvictedPrefix> evict_lru();

  [[nodiscard]] std::uint64_t evictable_blocks() const { return evictable_blocks_; }
  [[nodiscard]] std::size_t size() const { return map_.size(); }

 private:
  struct Entry {
    CachedPrefix group;
    std::list<std::uint64_t>::iterator lru;
  };
  std::unordered_map<std::uint64_t, Entry> map_;
  std::list<std::uint64_t> lru_;  // unreferenced groups, least recently used first
  std::uint64_t evictable_blocks_ = 0;
};

}  // namespace kvtier::bench
