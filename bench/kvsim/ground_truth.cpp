#include "bench/kvsim/ground_truth.hpp"

#include <fmt/format.h>
#include <cerrno>
#include <cstdio>
#include <memory>
#include <stdexcept>
#include <system_error>

namespace kvtier::bench {

std::string_view block_state_name(BlockState s) {
  switch (s) {
    case BlockState::kFree:
      return "free";
    case BlockState::kActive:
      return "active";
    case BlockState::kCached:
      return "cached";
  }
  return "unknown";
}

GroundTruth::GroundTruth(std::uint32_t blocks, TimeNs start, TimeNs episode_gap)
    : last_access_(blocks, start),
      episode_start_(blocks, start),
      episode_gap_(episode_gap),
      accesses_(blocks, 0),
      writes_(blocks, 0) {}

void GroundTruth::mirror_to(std::span<std::uint64_t> mirror) {
  if (mirror.size() != last_access_.size()) {
    throw std::logic_error("kvsim: live truth sized for another block count");
  }
  mirror_ = mirror;
  for (std::size_t b = 0; b < last_access_.size(); ++b) {
    std::atomic_ref<std::uint64_t>(mirror_[b]).store(last_access_[b], std::memory_order_relaxed);
  }
}

ColdBytes cold_bytes(const GroundTruth& truth, std::span<const BlockState> states,
                     const PoolLayout& layout, TimeNs now, TimeNs age_ns, bool resident_only) {
  ColdBytes c;
  for (BlockId b = 0; b < truth.blocks(); ++b) {
    if (resident_only && truth.accesses(b) == 0) continue;
    const bool cold = now >= truth.last_access(b) && now - truth.last_access(b) >= age_ns;
    const bool in_use = b < states.size() && states[b] != BlockState::kFree;
    c.resident += 1;
    c.cold += cold ? 1 : 0;
    c.in_use += in_use ? 1 : 0;
    c.cold_in_use += cold && in_use ? 1 : 0;
  }
  const std::uint64_t bb = layout.block_bytes();
  return ColdBytes{.resident = c.resident * bb,
                   .cold = c.cold * bb,
                   .in_use = c.in_use * bb,
                   .cold_in_use = c.cold_in_use * bb};
}

namespace {

struct FileCloser {
  void operator()(std::FILE* f) const {
    if (f != nullptr) std::fclose(f);
  }
};

void write_csv(std::FILE* f, const GroundTruth& truth, std::span<const BlockState> states,
               const TruthContext& ctx) {
  fmt::print(f, "block,tensor,start,end,state,last_access_ns,accesses,writes,episode_start_ns\n");
  const PoolLayout& l = ctx.layout;
  for (BlockId b = 0; b < truth.blocks(); ++b) {
    for (std::uint32_t t = 0; t < l.tensors(); ++t) {
      const std::uint64_t start = ctx.pool.start + l.offset(b, t);
      fmt::print(f, "{},{},{},{},{},{},{},{},{}\n", b, t, start, start + l.chunk_bytes,
                 block_state_name(states[b]), truth.last_access(b), truth.accesses(b),
                 truth.writes(b), truth.episode_start(b));
    }
  }
}

void write_json(std::FILE* f, const GroundTruth& truth, std::span<const BlockState> states,
                const TruthContext& ctx) {
  const PoolLayout& l = ctx.layout;
  // Written by hand rather than through a json tree: a large pool has a hundred thousand ranges.
  fmt::print(f,
             "{{\"pid\":{},\"time_ns\":{},\"pool\":[{},{}],\"layout\":{{\"order\":\"[layer][K,V]"
             "[block]\",\"layers\":{},\"tensors\":{},\"blocks\":{},\"chunk_bytes\":{},"
             "\"tensor_bytes\":{},\"block_bytes\":{}}},\"blocks\":[",
             ctx.pid, ctx.now, ctx.pool.start, ctx.pool.end, l.layers, l.tensors(), l.blocks,
             l.chunk_bytes, l.tensor_bytes(), l.block_bytes());
  for (BlockId b = 0; b < truth.blocks(); ++b) {
    fmt::print(f,
               "{}{{\"id\":{},\"state\":\"{}\",\"last_access_ns\":{},\"accesses\":{},"
               "\"writes\":{},\"episode_start_ns\":{},\"ranges\":[",
               b == 0 ? "\n" : ",\n", b, block_state_name(states[b]), truth.last_access(b),
               truth.accesses(b), truth.writes(b), truth.episode_start(b));
    for (std::uint32_t t = 0; t < l.tensors(); ++t) {
      const std::uint64_t start = ctx.pool.start + l.offset(b, t);
      fmt::print(f, "{}[{},{}]", t == 0 ? "" : ",", start, start + l.chunk_bytes);
    }
    fmt::print(f, "]}}");
  }
  fmt::print(f, "\n]}}\n");
}

}  // namespace

Result<void> write_truth(const std::filesystem::path& path, const GroundTruth& truth,
                         std::span<const BlockState> states, const TruthContext& ctx) {
  if (states.size() != truth.blocks()) {
    return fail(fmt::format("{}: {} block states for {} blocks (internal error)", path.string(),
                            states.size(), truth.blocks()));
  }
  const std::filesystem::path tmp = path.string() + ".tmp";
  std::unique_ptr<std::FILE, FileCloser> f(std::fopen(tmp.c_str(), "w"));
  if (!f) {
    const int err = errno;
    return fail(fmt::format("{}: cannot write ground truth: {}", tmp.string(), errno_text(err)),
                err);
  }
  if (path.extension() == ".csv") {
    write_csv(f.get(), truth, states, ctx);
  } else {
    write_json(f.get(), truth, states, ctx);
  }
  const bool write_failed = std::ferror(f.get()) != 0;
  if (std::fclose(f.release()) != 0 || write_failed) {
    const int err = errno;
    return fail(fmt::format("{}: writing ground truth failed: {}", tmp.string(), errno_text(err)),
                err);
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    return fail(fmt::format("{}: cannot rename {} into place: {}", path.string(), tmp.string(),
                            ec.message()),
                ec.value());
  }
  return {};
}

}  // namespace kvtier::bench
