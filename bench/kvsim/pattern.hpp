#pragma once
// The deterministic content of every KV chunk, so that any byte the kernel (or a mover) loses
// or garbles is caught when the simulator next reads it.
//
// Word i (8 bytes) of a chunk is a hash of (seed, block, generation, tensor, i). The generation
// changes each time a block is handed out again, so a stale copy of a previous owner's data
// does not pass for the new owner's. Reads either check every word of the filled part of a
// chunk, or a few 64-byte lines of each 4 KiB page of it (which still makes every page seen
// by the kernel as accessed, the point for tiering) with a rotating choice of lines.

#include <cstddef>
#include <cstdint>

namespace kvtier::bench {

inline constexpr std::uint64_t kLineBytes = 64;
inline constexpr std::uint64_t kPatternPageBytes = 4096;
inline constexpr std::uint32_t kLinesPerPage = kPatternPageBytes / kLineBytes;

struct ChunkKey {
  std::uint64_t seed = 0;
  std::uint32_t block = 0;
  std::uint32_t generation = 0;
  std::uint32_t tensor = 0;  // layer * 2 + (0 for K, 1 for V)
};

// The hash that every word of a chunk derives from.
std::uint64_t chunk_base(const ChunkKey& key);
inline std::uint64_t pattern_word(std::uint64_t base, std::uint64_t word_index) {
  // splitmix64's finaliser over a Weyl sequence: cheap, and every bit depends on the index.
  std::uint64_t z = base + (word_index + 1) * 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// Writes bytes [begin, end) of a chunk; both multiples of 8.
void write_pattern(std::byte* chunk, const ChunkKey& key, std::uint64_t begin, std::uint64_t end);

struct VerifyResult {
  std::uint64_t bytes_read = 0;  // bytes actually loaded from memory
  std::uint64_t bad_bytes = 0;   // of those, bytes that differ from the pattern
  std::int64_t first_bad = -1;   // byte offset in the chunk of the first bad byte, or -1
  std::uint64_t expected = 0;    // the first bad word as it should be, and as found
  std::uint64_t found = 0;

  VerifyResult& operator+=(const VerifyResult& o);
};

// Checks every word of bytes [0, filled) (filled a multiple of 8).
VerifyResult verify_full(const std::byte* chunk, const ChunkKey& key, std::uint64_t filled);

// Checks `lines_per_page` lines of each 4 KiB page of bytes [0, filled), evenly spread and
// shifted by `rotation`; 64 or more reads every line, i.e. verify_full.
VerifyResult verify_sampled(const std::byte* chunk, const ChunkKey& key, std::uint64_t filled,
                            std::uint32_t lines_per_page, std::uint64_t rotation);

}  // namespace kvtier::bench
