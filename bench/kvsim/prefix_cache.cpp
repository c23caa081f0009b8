#include "bench/kvsim/prefix_cache.hpp"

#include <utility>

namespace kvtier::bench {

const CachedPrefix* PrefixCache::find(std::uint64_t hash) const {
  auto it = map_.find(hash);
  return it == map_.end() ? nullptr : &it->second.group;
}

bool PrefixCache::acquire(std::uint64_t hash) {
  auto it = map_.find(hash);
  if (it == map_.end()) return false;
  Entry& e = it->second;
  if (e.group.refs == 0) {
    lru_.erase(e.lru);
    e.lru = lru_.end();
    evictable_blocks_ -= e.group.blocks.size();
  }
  ++e.group.refs;
  return true;
}

bool PrefixCache::release(std::uint64_t hash) {
  auto it = map_.find(hash);
  if (it == map_.end() || it->second.group.refs == 0) return false;
  Entry& e = it->second;
  if (--e.group.refs == 0) {
    e.lru = lru_.insert(lru_.end(), hash);
    evictable_blocks_ += e.group.blocks.size();
  }
  return true;
}

bool PrefixCache::insert(std::uint64_t hash, std::vector<BlockId> blocks, std::uint32_t tokens) {
  if (map_.contains(hash)) return false;
  map_.emplace(
      hash, Entry{.group = CachedPrefix{.blocks = std::move(blocks), .tokens = tokens, .refs = 1},
                  .lru = lru_.end()});
  return true;
}

std::optional<EvictedPrefix> PrefixCache::evict_lru() {
  if (lru_.empty()) return std::nullopt;
  const std::uint64_t hash = lru_.front();
  lru_.pop_front();
  auto it = map_.find(hash);
  EvictedPrefix out{.hash = hash, .blocks = std::move(it->second.group.blocks)};
  evictable_blocks_ -= out.blocks.size();
  map_.erase(it);
  return out;
}

}  // namespace kvtier::bench
