#include "bench/kvsim/pattern.hpp"

#include <algorithm>
#include <bit>
#include <cstring>

namespace kvtier::bench {

std::uint64_t chunk_base(const ChunkKey& key) {
  const std::uint64_t id = (std::uint64_t{key.block} << 32) | key.generation;
  return pattern_word(pattern_word(key.seed, id), key.tensor);
}

void write_pattern(std::byte* chunk, const ChunkKey& key, std::uint64_t begin, std::uint64_t end) {
  const std::uint64_t base = chunk_base(key);
  for (std::uint64_t w = begin / 8; w < end / 8; ++w) {
    const std::uint64_t v = pattern_word(base, w);
    std::memcpy(chunk + w * 8, &v, sizeof v);
  }
}

VerifyResult& VerifyResult::operator+=(const VerifyResult& o) {
  if (first_bad < 0 && o.first_bad >= 0) {
    first_bad = o.first_bad;
    expected = o.expected;
    found = o.found;
  }
  bytes_read += o.bytes_read;
  bad_bytes += o.bad_bytes;
  return *this;
}

namespace {

// Words [first, last) of a chunk.
void check_words(const std::byte* chunk, std::uint64_t base, std::uint64_t first,
                 std::uint64_t last, VerifyResult& r) {
  for (std::uint64_t w = first; w < last; ++w) {
    std::uint64_t v = 0;
    std::memcpy(&v, chunk + w * 8, sizeof v);
    const std::uint64_t want = pattern_word(base, w);
    if (v != want) [[unlikely]] {
      std::uint64_t diff = v ^ want;
      for (int b = 0; b < 8; ++b, diff >>= 8) {
        if ((diff & 0xff) != 0) ++r.bad_bytes;
      }
      if (r.first_bad < 0) {
        r.first_bad = static_cast<std::int64_t>(w * 8) + std::countr_zero(v ^ want) / 8;
        r.expected = want;
        r.found = v;
      }
    }
  }
  r.bytes_read += (last - first) * 8;
}

}  // namespace

VerifyResult verify_full(const std::byte* chunk, const ChunkKey& key, std::uint64_t filled) {
  VerifyResult r;
  check_words(chunk, chunk_base(key), 0, filled / 8, r);
  return r;
}

VerifyResult verify_sampled(const std::byte* chunk, const ChunkKey& key, std::uint64_t filled,
                            std::uint32_t lines_per_page, std::uint64_t rotation) {
  if (lines_per_page >= kLinesPerPage) return verify_full(chunk, key, filled);
  VerifyResult r;
  const std::uint64_t base = chunk_base(key);
  const std::uint32_t k = std::max<std::uint32_t>(lines_per_page, 1);
  for (std::uint64_t page = 0; page < filled; page += kPatternPageBytes) {
    const std::uint64_t page_end = std::min(page + kPatternPageBytes, filled);
    const std::uint64_t lines = (page_end - page + kLineBytes - 1) / kLineBytes;
    const std::uint64_t picks = std::min<std::uint64_t>(k, lines);
    for (std::uint64_t i = 0; i < picks; ++i) {
      const std::uint64_t line = (rotation + i * lines / picks) % lines;
      const std::uint64_t from = page + line * kLineBytes;
      const std::uint64_t to = std::min(from + kLineBytes, page_end);
      check_words(chunk, base, from / 8, to / 8, r);
    }
  }
  return r;
}

}  // namespace kvtier::bench
