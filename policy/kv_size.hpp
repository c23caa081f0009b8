#pragma once
// KV-cache sizing as an operator plans it:
//   bytes = 2 (K and V) x layers x kv_heads x head_dim x tokens x batch x bytes per element
// with the shapes of common models, and how a cache of that size splits
// between DRAM and a CXL node.

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "policy/error.hpp"

namespace kvtier::policy {

enum class KvDtype : std::uint8_t { kFp32, kFp16, kBf16, kFp8 };

Result<KvDtype> parse_kv_dtype(std::string_view name);
std::string_view kv_dtype_name(KvDtype dtype);
unsigned kv_dtype_bytes(KvDtype dtype);

struct KvShape {
  std::string_view name;
  std::uint64_t layers = 0;
  std::uint64_t kv_heads = 0;  // key/value heads (fewer than query heads under GQA)
  std::uint64_t head_dim = 0;
  std::string_view note;
};

// The presets, in a fixed order (for `kv-size --list-models`).
std::span<const KvShape> kv_presets();
const KvShape* find_kv_preset(std::string_view name);

// Bytes of K and V for one token across all layers; an error on a zero
// dimension or on overflow.
Result<std::uint64_t> kv_bytes_per_token(const KvShape& shape, KvDtype dtype);
Result<std::uint64_t> kv_cache_bytes(const KvShape& shape, KvDtype dtype, std::uint64_t tokens,
                                     std::uint64_t batch);

struct KvSplit {
  std::uint64_t dram_bytes = 0;
  std::uint64_t cxl_bytes = 0;
  std::uint64_t unplaced_bytes = 0;  // fits in neither
};

// DRAM first up to `dram_budget`, the rest on the CXL node up to its free
// memory: the placement kvtier converges to when the whole cache is cold
// except what the DRAM budget holds.
KvSplit split_kv(std::uint64_t total, std::uint64_t dram_budget, std::uint64_t cxl_free);

// "160 GiB", "320 KiB", "2.5 MiB", "17 B": binary units, at most one decimal.
std::string human_bytes(std::uint64_t bytes);
// "65536", "64K" (x1024), "1M", "2G": token and batch counts.
Result<std::uint64_t> parse_count(std::string_view text);
// "64G", "64GiB", "512M", "1T", "4096": byte sizes in binary units.
Result<std::uint64_t> parse_bytes(std::string_view text);

}  // namespace kvtier::policy
