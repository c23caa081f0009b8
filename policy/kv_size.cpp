#include "policy/kv_size.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <charconv>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <string_view>
#include <system_error>

#include "policy/error.hpp"

namespace kvtier::policy {
namespace {

// Shapes from each model's published config.json (num_hidden_layers,
// num_key_value_heads, hidden_size / num_attention_heads).
constexpr std::array kPresets{
    KvShape{.name = "llama3-8b",
            .layers = 32,
            .kv_heads = 8,
            .head_dim = 128,
            .note = "Llama 3 / 3.1 8B, GQA 32:8"},
    KvShape{.name = "llama3-70b",
            .layers = 80,
            .kv_heads = 8,
            .head_dim = 128,
            .note = "Llama 3 / 3.1 / 3.3 70B, GQA 64:8"},
    KvShape{.name = "llama3-70b-mha",
            .layers = 80,
            .kv_heads = 64,
            .head_dim = 128,
            .note = "Llama 3 70B shape without GQA (64 KV heads), for comparison"},
    KvShape{.name = "llama3-405b",
            .layers = 126,
            .kv_heads = 8,
            .head_dim = 128,
            .note = "Llama 3.1 405B, GQA 128:8"},
    KvShape{.name = "llama2-7b",
            .layers = 32,
            .kv_heads = 32,
            .head_dim = 128,
            .note = "Llama 2 7B, multi-head attention"},
    KvShape{.name = "llama2-70b",
            .layers = 80,
            .kv_heads = 8,
            .head_dim = 128,
            .note = "Llama 2 70B, GQA 64:8"},
    KvShape{.name = "mistral-7b",
            .layers = 32,
            .kv_heads = 8,
            .head_dim = 128,
            .note = "Mistral 7B, GQA 32:8"},
    KvShape{.name = "mixtral-8x7b",
            .layers = 32,
            .kv_heads = 8,
            .head_dim = 128,
            .note = "Mixtral 8x7B, GQA 32:8"},
    KvShape{.name = "qwen2-7b",
            .layers = 28,
            .kv_heads = 4,
            .head_dim = 128,
            .note = "Qwen2 / 2.5 7B, GQA 28:4"},
    KvShape{.name = "qwen2-72b",
            .layers = 80,
            .kv_heads = 8,
            .head_dim = 128,
            .note = "Qwen2 / 2.5 72B, GQA 64:8"},
};

bool mul(std::uint64_t a, std::uint64_t b, std::uint64_t& out) {
  return !__builtin_mul_overflow(a, b, &out);
}

// "64K" -> 64 * 1024; `suffix_ok` accepts a trailing "B"/"iB" for byte sizes.
Result<std::uint64_t> parse_scaled(std::string_view text, bool bytes, std::string_view what) {
  const auto bad = [&] {
    return fail(
        fmt::format("{} \"{}\" is not a number with an optional K, M, G or T suffix", what, text));
  };
  std::uint64_t value = 0;
  const char* first = text.data();
  const char* end = first + text.size();
  auto [ptr, ec] = std::from_chars(first, end, value);
  if (ec != std::errc() || ptr == first) return bad();
  std::string_view rest(ptr, static_cast<std::size_t>(end - ptr));
  unsigned shift = 0;
  if (!rest.empty()) {
    switch (std::toupper(static_cast<unsigned char>(rest.front()))) {
      case 'K':
        shift = 10;
        break;
      case 'M':
        shift = 20;
        break;
      case 'G':
        shift = 30;
        break;
      case 'T':
        shift = 40;
        break;
      case 'B':
        if (!bytes || rest.size() != 1) return bad();
        return value;
      default:
        return bad();
    }
    rest.remove_prefix(1);
    if (bytes && (rest == "iB" || rest == "B" || rest == "ib" || rest == "b")) rest = {};
    if (!rest.empty()) return bad();
  }
  if (shift > 0 && value > (std::numeric_limits<std::uint64_t>::max() >> shift)) {
    return fail(fmt::format("{} \"{}\" is too large", what, text));
  }
  return value << shift;
}

}  // namespace

Result<KvDtype> parse_kv_dtype(std::string_view name) {
  if (name == "fp16") return KvDtype::kFp16;
  if (name == "bf16") return KvDtype::kBf16;
  if (name == "fp8") return KvDtype::kFp8;
  if (name == "fp32") return KvDtype::kFp32;
  return fail(fmt::format("dtype \"{}\" is not one of fp16, bf16, fp8, fp32", name));
}

std::string_view kv_dtype_name(KvDtype dtype) {
  switch (dtype) {
    case KvDtype::kFp32:
      return "fp32";
    case KvDtype::kFp16:
      return "fp16";
    case KvDtype::kBf16:
      return "bf16";
    case KvDtype::kFp8:
      return "fp8";
  }
  return "?";
}

unsigned kv_dtype_bytes(KvDtype dtype) {
  switch (dtype) {
    case KvDtype::kFp32:
      return 4;
    case KvDtype::kFp16:
    case KvDtype::kBf16:
      return 2;
    case KvDtype::kFp8:
      return 1;
  }
  return 0;
}

std::span<const KvShape> kv_presets() {
  return kPresets;
}

const KvShape* find_kv_preset(std::string_view name) {
  for (const auto& p : kPresets) {
    if (p.name == name) return &p;
  }
  return nullptr;
}

Result<std::uint64_t> kv_bytes_per_token(const KvShape& shape, KvDtype dtype) {
  if (shape.layers == 0 || shape.kv_heads == 0 || shape.head_dim == 0) {
    return fail(fmt::format("layers ({}), kv_heads ({}) and head_dim ({}) must all be positive",
                            shape.layers, shape.kv_heads, shape.head_dim));
  }
  std::uint64_t b = 2;
  if (!mul(b, shape.layers, b) || !mul(b, shape.kv_heads, b) || !mul(b, shape.head_dim, b) ||
      !mul(b, kv_dtype_bytes(dtype), b)) {
    return fail("bytes per token overflow 64 bits: check the dimensions");
  }
  return b;
}

Result<std::uint64_t> kv_cache_bytes(const KvShape& shape, KvDtype dtype, std::uint64_t tokens,
                                     std::uint64_t batch) {
  auto per_token = kv_bytes_per_token(shape, dtype);
  if (!per_token) return per_token;
  if (tokens == 0 || batch == 0) return fail("tokens and batch must be positive");
  std::uint64_t total = *per_token;
  if (!mul(total, tokens, total) || !mul(total, batch, total)) {
    return fail("KV cache size overflows 64 bits: check tokens and batch");
  }
  return total;
}

KvSplit split_kv(std::uint64_t total, std::uint64_t dram_budget, std::uint64_t cxl_free) {
  KvSplit s;
  s.dram_bytes = std::min(total, dram_budget);
  s.cxl_bytes = std::min(total - s.dram_bytes, cxl_free);
  s.unplaced_bytes = total - s.dram_bytes - s.cxl_bytes;
  return s;
}

std::string human_bytes(std::uint64_t bytes) {
  constexpr std::array<std::string_view, 6> kUnits{"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  std::size_t unit = 0;
  std::uint64_t whole = bytes;
  while (whole >= 1024 && unit + 1 < kUnits.size()) {
    whole >>= 10;
    ++unit;
  }
  if (unit == 0) return fmt::format("{} B", bytes);
  const double scaled = static_cast<double>(bytes) / static_cast<double>(1ULL << (10 * unit));
  // Exact multiples print without a decimal: "160 GiB", not "160.0 GiB".
  if ((bytes & ((1ULL << (10 * unit)) - 1)) == 0) return fmt::format("{} {}", whole, kUnits[unit]);
  return fmt::format("{:.1f} {}", scaled, kUnits[unit]);
}

Result<std::uint64_t> parse_count(std::string_view text) {
  return parse_scaled(text, false, "count");
}

Result<std::uint64_t> parse_bytes(std::string_view text) {
  return parse_scaled(text, true, "size");
}

}  // namespace kvtier::policy
