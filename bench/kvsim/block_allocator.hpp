#pragma once
// vLLM's free block queue: one list shared by every sequence, handed out from the head and
// refilled at the tail. Because sequences grow and finish at different times, the blocks of one
// sequence end up scattered between those of others, which is what makes the kernel's view of
// the pool a mix of hot and cold pages rather than hot and cold ranges.

#include <cstdint>
#include <deque>
#include <optional>
#include <vector>

namespace kvtier::bench {

using BlockId = std::uint32_t;

class BlockAllocator {
 public:
  // All blocks start free, in address order.
  explicit BlockAllocator(std::uint32_t blocks);

  // The head of the free list, or nothing when it is empty.
  std::optional<BlockId> allocate();
  // Appends to the tail. False (and no change) for an unknown or already free block.
  [[nodiscard]] bool release(BlockId block);

  [[nodiscard]] std::uint32_t free_count() const {
    return static_cast<std::uint32_t>(free_.size());
  }
  [[nodiscard]] std::uint32_t total() const { return static_cast<std::uint32_t>(is_free_.size()); }
  [[nodiscard]] bool is_free(BlockId block) const {
    return block < is_free_.size() && is_free_[block];
  }

 private:
  std::deque<BlockId> free_;
  std::vector<bool> is_free_;
};

}  // namespace kvtier::bench
