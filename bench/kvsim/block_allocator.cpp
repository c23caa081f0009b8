#include "bench/kvsim/block_allocator.hpp"

namespace kvtier::bench {

BlockAllocator::BlockAllocator(std::uint32_t blocks) : is_free_(blocks, true) {
  for (BlockId b = 0; b < blocks; ++b) free_.push_back(b);
}

std::optional<BlockId> BlockAllocator::allocate() {
  if (free_.empty()) return std::nullopt;
  const BlockId b = free_.front();
  free_.pop_front();
  is_free_[b] = false;
  return b;
}

bool BlockAllocator::release(BlockId block) {
  if (block >= is_free_.size() || is_free_[block]) return false;
  is_free_[block] = true;
  free_.push_back(block);
  return true;
}

}  // namespace kvtier::bench
