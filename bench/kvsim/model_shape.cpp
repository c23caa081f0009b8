#include "bench/kvsim/model_shape.hpp"

#include <fmt/format.h>
#include <charconv>

namespace kvtier::bench {

Result<ModelShape> model_preset(std::string_view name) {
  // Llama 3 uses grouped-query attention: 8 KV heads of 128 for both sizes.
  if (name == "llama3-8b") {
    return ModelShape{
        .name = "llama3-8b", .layers = 32, .kv_heads = 8, .head_dim = 128, .dtype_bytes = 2};
  }
  if (name == "llama3-70b") {
    return ModelShape{
        .name = "llama3-70b", .layers = 80, .kv_heads = 8, .head_dim = 128, .dtype_bytes = 2};
  }
  return fail(fmt::format("unknown model preset '{}'; use llama3-8b or llama3-70b", name));
}

Result<std::uint32_t> dtype_bytes(std::string_view dtype) {
  if (dtype == "fp16" || dtype == "bf16") return 2U;
  if (dtype == "fp8") return 1U;
  if (dtype == "fp32") return 4U;
  return fail(fmt::format("unknown dtype '{}'; use fp16, bf16, fp8 or fp32", dtype));
}

Result<std::uint64_t> parse_size(std::string_view text) {
  std::uint64_t value = 0;
  const char* first = text.data();
  const char* last = first + text.size();
  auto [ptr, ec] = std::from_chars(first, last, value);
  if (ec != std::errc{} || ptr == first) {
    return fail(fmt::format("bad size '{}'; expected e.g. 512MiB, 1GiB or a byte count", text));
  }
  std::string_view unit(ptr, static_cast<std::size_t>(last - ptr));
  if (unit.ends_with("iB")) {
    unit.remove_suffix(2);
  } else if (unit.ends_with("B")) {
    unit.remove_suffix(1);
  }
  unsigned shift = 0;
  if (unit.empty()) {
    shift = 0;
  } else if (unit == "K" || unit == "k") {
    shift = 10;
  } else if (unit == "M") {
    shift = 20;
  } else if (unit == "G") {
    shift = 30;
  } else if (unit == "T") {
    shift = 40;
  } else {
    return fail(fmt::format("bad size unit in '{}'; use K, M, G or T (binary), e.g. 512MiB", text));
  }
  if (shift > 0 && value > (~std::uint64_t{0} >> shift)) {
    return fail(fmt::format("size '{}' is too large", text));
  }
  return value << shift;
}

namespace {

Result<void> check_model(const ModelShape& m) {
  if (m.layers == 0 || m.kv_heads == 0 || m.head_dim == 0 || m.dtype_bytes == 0) {
    return fail(
        fmt::format("model {}: layers, kv heads, head dim and dtype must all be positive", m.name));
  }
  // The pattern is written in 8-byte words and sampled by 64-byte lines; a token slot must be
  // whole words so appending one token never rewrites a neighbour's bytes.
  if (m.token_bytes() % 8 != 0) {
    return fail(
        fmt::format("model {}: one token's K per layer is {} bytes; it must be a multiple of 8 "
                    "(raise --kv-heads or --head-dim)",
                    m.name, m.token_bytes()));
  }
  return {};
}

}  // namespace

Result<Scaling> choose_scaling(const ScalingRequest& req) {
  const ModelShape& m = req.model;
  if (auto ok = check_model(m); !ok) return std::unexpected(ok.error());
  if (req.budget_bytes == 0)
    return fail("the KV budget must be positive (e.g. --kv-budget 512MiB)");
  if (req.capacity_tokens == 0) return fail("the capacity must be positive (--capacity-tokens)");

  // How much smaller the pool must be than the modelled server's.
  const auto real_bytes = static_cast<long double>(req.capacity_tokens) *
                          static_cast<long double>(m.kv_bytes_per_token());
  const long double needed = real_bytes / static_cast<long double>(req.budget_bytes);

  std::uint32_t layer_scale = 1;
  if (req.layer_scale) {
    layer_scale = *req.layer_scale;
    if (layer_scale == 0 || m.layers % layer_scale != 0) {
      return fail(
          fmt::format("--layer-scale {} must divide the model's {} layers", layer_scale, m.layers));
    }
  } else {
    for (std::uint32_t d = 1; d <= m.layers; ++d) {
      if (m.layers % d == 0 && static_cast<long double>(d) <= needed) layer_scale = d;
    }
  }

  std::uint32_t token_scale = 1;
  if (req.token_scale) {
    token_scale = *req.token_scale;
    if (token_scale == 0 || kMaxTokenScale % token_scale != 0) {
      return fail(fmt::format(
          "--token-scale {} must divide {} so a 512-token hash block stays whole blocks",
          token_scale, kMaxTokenScale));
    }
  } else {
    // The smallest power of two that is enough; when even the largest falls short, keep it and
    // let the pool stand for fewer tokens (Scaling::capacity_tokens says how many) rather than
    // refuse a small guest.
    const long double rest = needed / static_cast<long double>(layer_scale);
    while (token_scale < kMaxTokenScale && static_cast<long double>(token_scale) < rest) {
      token_scale *= 2;
    }
  }

  Scaling s{.model = m,
            .sim_layers = m.layers / layer_scale,
            .layer_scale = layer_scale,
            .token_scale = token_scale};
  const std::uint64_t block_bytes = s.block_bytes();
  // check_model() rules out a zero dimension; said again here for the analyzer.
  if (block_bytes == 0) return fail(fmt::format("model {}: a KV block of 0 bytes", m.name));
  const std::uint64_t blocks = req.budget_bytes / block_bytes;
  if (blocks < s.blocks_per_hash()) {
    return fail(fmt::format(
        "--kv-budget {} bytes holds {} blocks of {} bytes; at least {} are needed (one hash "
        "block); raise the budget or the scales",
        req.budget_bytes, blocks, block_bytes, s.blocks_per_hash()));
  }
  if (blocks > 0xffffffffULL) return fail("the KV budget holds more than 2^32 blocks; lower it");
  s.blocks = static_cast<std::uint32_t>(blocks);
  s.pool_bytes = blocks * block_bytes;
  s.capacity_tokens = blocks * kBlockTokens * token_scale;
  return s;
}

}  // namespace kvtier::bench
