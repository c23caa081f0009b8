#pragma once
// The shape of a model's KV cache and how it is scaled down to fit a memory budget.
//
// vLLM stores, per layer, a K and a V tensor of [num_blocks][16 tokens][kv_heads][head_dim].
// One "chunk" is one block's slice of one of those tensors: 16 x kv_heads x head_dim x dtype
// bytes (32 KiB for both Llama-3 models at fp16). A real host holds far more KV than a test
// machine or guest, so the simulator models a server with `capacity_tokens` of KV and shrinks
// it to the budget, in this order:
//   1. layers (each simulated layer stands for `layer_scale` real ones): every decode step reads
//      every layer of a block, so dropping layers keeps the block's bytes hot or cold together
//      and leaves the hot/cold fractions, the chunk size and the page pattern unchanged;
//   2. tokens (each simulated token stands for `token_scale` real ones, for prompts and outputs
//      alike): fewer blocks per sequence and fewer decode steps per request, but the same
//      prefix sharing, because a 512-token Mooncake hash block stays a whole number of blocks.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "policy/error.hpp"

namespace kvtier::bench {

inline constexpr std::uint32_t kBlockTokens = 16;       // vLLM's default block size
inline constexpr std::uint32_t kHashBlockTokens = 512;  // one Mooncake hash id
inline constexpr std::uint32_t kMaxTokenScale = kHashBlockTokens / kBlockTokens;

struct ModelShape {
  std::string name;
  std::uint32_t layers = 0;
  std::uint32_t kv_heads = 0;
  std::uint32_t head_dim = 0;
  std::uint32_t dtype_bytes = 2;

  // One token's K (or V) in one layer.
  [[nodiscard]] std::uint64_t token_bytes() const {
    return std::uint64_t{kv_heads} * head_dim * dtype_bytes;
  }
  // One block's K (or V) in one layer.
  [[nodiscard]] std::uint64_t chunk_bytes() const { return token_bytes() * kBlockTokens; }
  // K and V of one token over all layers: what the README calls "KV bytes per token".
  [[nodiscard]] std::uint64_t kv_bytes_per_token() const { return 2 * token_bytes() * layers; }
};

// "llama3-8b" or "llama3-70b".
Result<ModelShape> model_preset(std::string_view name);
// "fp16", "bf16", "fp8", "fp32" -> bytes per element.
Result<std::uint32_t> dtype_bytes(std::string_view dtype);
// "512MiB", "1GiB", "64K", "4096": binary units, an optional trailing "B" or "iB".
Result<std::uint64_t> parse_size(std::string_view text);

struct ScalingRequest {
  ModelShape model;
  std::uint64_t budget_bytes = 0;
  std::uint64_t capacity_tokens = 0;         // the modelled server's KV capacity, in real tokens
  std::optional<std::uint32_t> layer_scale;  // forced instead of chosen
  std::optional<std::uint32_t> token_scale;
};

struct Scaling {
  ModelShape model;                   // the real model
  std::uint32_t sim_layers = 0;       // layers held in memory
  std::uint32_t layer_scale = 1;      // real layers per simulated layer
  std::uint32_t token_scale = 1;      // real tokens per simulated token
  std::uint32_t blocks = 0;           // blocks in the pool (each has every simulated layer)
  std::uint64_t pool_bytes = 0;       // blocks x sim_layers x 2 x chunk
  std::uint64_t capacity_tokens = 0;  // real tokens the pool stands for

  [[nodiscard]] std::uint64_t block_bytes() const {
    return std::uint64_t{sim_layers} * 2 * model.chunk_bytes();
  }
  // Simulated tokens for `real` tokens (rounded up: a started token occupies a slot).
  [[nodiscard]] std::uint32_t sim_tokens(std::uint32_t real) const {
    return (real + token_scale - 1) / token_scale;
  }
  // Simulated blocks per Mooncake hash id.
  [[nodiscard]] std::uint32_t blocks_per_hash() const {
    return kHashBlockTokens / token_scale / kBlockTokens;
  }
};

// Chooses layer and token scale (unless forced) so that the pool fits the budget and stands for
// `capacity_tokens`; the pool then fills the budget. When even the largest scales do not
// suffice, the pool stands for fewer tokens than asked (see Scaling::capacity_tokens). Fails on
// a malformed model, a forced scale that does not divide, or a budget below one hash block.
Result<Scaling> choose_scaling(const ScalingRequest& req);

}  // namespace kvtier::bench
