#pragma once
// kvtier_scale_bench's generator (bench/scale_bench.cpp): a process's KV pool in the KV shape,
// where its blocks are, and the page samples the kernel's NUMA scan would give of them.

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <random>
#include <utility>
#include <vector>

#include "policy/types.hpp"

namespace kvtier::bench {

inline constexpr TimeNs kSec = 1'000'000'000;
inline constexpr std::uint64_t kBlock = 64ULL * 1024;  // a KV block
inline constexpr std::uint64_t kPagesPerBlock = kBlock / kPageSize;
inline constexpr std::uint64_t kPoolBase = 0x7f0000000000;

// What a block holds in the generator's KV cache.
enum class Kind : std::uint8_t { kIdle, kWarm, kHot };

// One process's pool in the KV shape: sequences of 16 to 1024 blocks, each
// sequence hot (decoding: read at every step), warm (finished seconds ago,
// kept for prefix reuse) or idle (finished minutes ago). Hot and warm blocks
// are on node 0, idle ones on node 1: the steady state kvtier aims at, in which
// a step has nothing to move.
struct Pool {
  Pid pid = 0;
  std::uint64_t bytes = 0;
  std::vector<Kind> kind;           // per block
  std::vector<std::int8_t> node;    // per block
  std::vector<std::uint64_t> hot;   // hot blocks' indexes
  std::uint64_t next_hot_page = 0;  // where the next step's samples start

  // The hot and warm sequences hold hot_share and warm_share of the blocks, to the nearest
  // sequence's half (a draw per sequence would give a few long ones the share at one size and
  // not at another: the 16 GiB pool had half its 3% hot, the 1 TiB pool with 1638 MiB hot and
  // warm 2.5 times the 16 GiB pool's hot blocks), the sequences chosen at random.
  // `drawn`: as up to 2026-12-07's 24th note instead, each sequence's kind drawn on its own.
  Pool(Pid p, std::uint64_t size, double hot_share, double warm_share, std::mt19937_64& rng,
       bool drawn = false)
      : pid(p), bytes(size) {
    const std::uint64_t blocks = size / kBlock;
    kind.resize(blocks, Kind::kIdle);
    node.resize(blocks, 1);
    std::uniform_int_distribution<std::uint64_t> len(16, 1024);
    std::uniform_real_distribution<double> u(0, 1);
    std::vector<std::pair<std::uint64_t, std::uint64_t>> seqs;  // first block, blocks
    std::vector<Kind> kinds;
    for (std::uint64_t b = 0; b < blocks;) {
      const std::uint64_t n = std::min(len(rng), blocks - b);
      seqs.emplace_back(b, n);
      kinds.push_back(Kind::kIdle);
      if (drawn) {
        const double r = u(rng);
        kinds.back() =
            r < hot_share ? Kind::kHot : (r < hot_share + warm_share ? Kind::kWarm : Kind::kIdle);
      }
      b += n;
    }
    std::vector<std::size_t> order(seqs.size());
    for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
    if (!drawn) std::shuffle(order.begin(), order.end(), rng);
    const auto want_hot = static_cast<std::uint64_t>(hot_share * static_cast<double>(blocks));
    const auto want_warm = static_cast<std::uint64_t>(warm_share * static_cast<double>(blocks));
    std::uint64_t hot_blocks = 0;
    std::uint64_t warm_blocks = 0;
    for (const std::size_t s : order) {
      const auto [b, n] = seqs[s];
      Kind k = kinds[s];
      if (!drawn && 2 * (hot_blocks + n) <= 2 * want_hot + n) {
        k = Kind::kHot;
        hot_blocks += n;
      } else if (!drawn && 2 * (warm_blocks + n) <= 2 * want_warm + n) {
        k = Kind::kWarm;
        warm_blocks += n;
      }
      for (std::uint64_t i = b; i < b + n; ++i) {
        kind[i] = k;
        node[i] = k == Kind::kIdle ? std::int8_t{1} : std::int8_t{0};
      }
    }
    for (std::uint64_t i = 0; i < blocks; ++i) {
      if (kind[i] == Kind::kHot) hot.push_back(i);
    }
  }
  [[nodiscard]] AddrRange range() const { return {kPoolBase, kPoolBase + bytes}; }
  [[nodiscard]] int node_of(std::uint64_t addr) const {
    if (addr < kPoolBase || addr >= kPoolBase + bytes) return -ENOENT;
    return node[(addr - kPoolBase) / kBlock];
  }
  [[nodiscard]] std::uint64_t bytes_on(int n) const {
    return kBlock * static_cast<std::uint64_t>(std::ranges::count(node, n));
  }
  // When within the 5 s before `now` the sample of the page at `addr` came: each
  // page at its own moment, as the kernel's scan unmaps and faults them.
  static TimeNs jittered(TimeNs now, std::uint64_t addr) {
    constexpr std::uint64_t kGolden = 2654435761;
    return now - static_cast<TimeNs>((addr / kPageSize * kGolden) % 50) * (kSec / 10);
  }
  // The next `n` pages of the hot blocks, in turn.
  void sample_hot(std::uint64_t n, TimeNs now, std::vector<AccessSample>& out) {
    const std::uint64_t pages = hot.size() * kPagesPerBlock;
    if (pages == 0) return;
    for (std::uint64_t i = 0; i < std::min(n, pages); ++i) {
      const std::uint64_t p = (next_hot_page + i) % pages;
      const std::uint64_t addr =
          kPoolBase + hot[p / kPagesPerBlock] * kBlock + (p % kPagesPerBlock) * kPageSize;
      out.push_back(
          AccessSample{.pid = pid, .addr = addr, .time = jittered(now, addr), .weight = 1});
    }
    next_hot_page = (next_hot_page + std::min(n, pages)) % pages;
  }
  // Every page of the blocks of kind `k` from block `from`, at most `max` pages;
  // returns the block to go on from.
  std::uint64_t sample_all(Kind k, std::uint64_t from, std::uint64_t max, TimeNs now,
                           std::vector<AccessSample>& out) const {
    std::uint64_t b = from;
    for (; b < kind.size() && out.size() + kPagesPerBlock <= max; ++b) {
      if (kind[b] != k) continue;
      for (std::uint64_t p = 0; p < kPagesPerBlock; ++p) {
        const std::uint64_t addr = kPoolBase + b * kBlock + p * kPageSize;
        out.push_back(
            AccessSample{.pid = pid, .addr = addr, .time = jittered(now, addr), .weight = 1});
      }
    }
    return b;
  }
};

}  // namespace kvtier::bench
