#pragma once
// The KV memory itself: one anonymous private mapping holding, like vLLM, a K and a V tensor
// per layer, each [blocks][16 tokens][kv_heads][head_dim]:
//
//   pool = [layer 0 K][layer 0 V][layer 1 K][layer 1 V] ...   each tensor = blocks x chunk
//
// vLLM allocates each layer's tensor separately; putting them in one mapping keeps the same
// placement of a block's bytes (one chunk in every tensor, far apart) while giving the daemon
// and the benchmark a single address range to watch. A block id names the same slot in every
// tensor.

#include <cstddef>
#include <cstdint>

#include "bench/kvsim/block_allocator.hpp"
#include "policy/error.hpp"
#include "policy/types.hpp"

namespace kvtier::bench {

struct PoolLayout {
  std::uint32_t layers = 0;  // simulated layers
  std::uint32_t blocks = 0;
  std::uint64_t chunk_bytes = 0;  // one block in one tensor
  std::uint64_t token_bytes = 0;  // one token in one chunk

  [[nodiscard]] std::uint32_t tensors() const { return 2 * layers; }
  [[nodiscard]] std::uint64_t tensor_bytes() const { return std::uint64_t{blocks} * chunk_bytes; }
  [[nodiscard]] std::uint64_t total_bytes() const { return tensor_bytes() * tensors(); }
  [[nodiscard]] std::uint64_t block_bytes() const { return chunk_bytes * tensors(); }
  [[nodiscard]] std::uint64_t offset(BlockId block, std::uint32_t tensor) const {
    return tensor * tensor_bytes() + std::uint64_t{block} * chunk_bytes;
  }
};

struct PoolOptions {
  bool hugepages = false;     // madvise(MADV_HUGEPAGE)
  bool no_hugepages = false;  // madvise(MADV_NOHUGEPAGE): 4 KiB pages even with THP "always"
  bool populate = true;       // fault every page in now, as torch.zeros() does for vLLM's cache
};

class KvPool {
 public:
  static Result<KvPool> create(const PoolLayout& layout, const PoolOptions& options);
  KvPool(const KvPool&) = delete;
  KvPool& operator=(const KvPool&) = delete;
  KvPool(KvPool&& other) noexcept;
  KvPool& operator=(KvPool&& other) noexcept;
  ~KvPool();

  [[nodiscard]] const PoolLayout& layout() const { return layout_; }
  [[nodiscard]] std::byte* chunk(BlockId block, std::uint32_t tensor) const {
    return base_ + layout_.offset(block, tensor);
  }
  [[nodiscard]] AddrRange range() const;

 private:
  KvPool(std::byte* base, std::size_t length, const PoolLayout& layout)
      : base_(base), length_(length), layout_(layout) {}
  std::byte* base_ = nullptr;
  std::size_t length_ = 0;
  PoolLayout layout_;
};

}  // namespace kvtier::bench
