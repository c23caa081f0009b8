// The allocator, the prefix cache and the pattern: the pieces the simulator's memory is made of.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "bench/kvsim/block_allocator.hpp"
#include "bench/kvsim/pattern.hpp"
#include "bench/kvsim/prefix_cache.hpp"

namespace kvtier::bench {
namespace {

TEST(KvsimAllocator, HandsOutFromTheHeadAndTakesBackAtTheTail) {
  BlockAllocator a(4);
  EXPECT_EQ(a.allocate(), 0U);
  EXPECT_EQ(a.allocate(), 1U);
  EXPECT_TRUE(a.release(0));
  EXPECT_FALSE(a.release(0));  // twice
  EXPECT_FALSE(a.release(9));  // unknown
  EXPECT_EQ(a.allocate(), 2U);
  EXPECT_EQ(a.allocate(), 3U);
  EXPECT_EQ(a.allocate(), 0U);  // the released one, after the never-used ones
  EXPECT_EQ(a.allocate(), std::nullopt);
  EXPECT_EQ(a.free_count(), 0U);
}

TEST(KvsimAllocator, SequencesGrowingTogetherInterleave) {
  // Two sequences appending a block each per turn, then a third after the first finished:
  // their blocks mix in memory, as they do in vLLM's pool.
  BlockAllocator a(8);
  std::vector<BlockId> s1;
  std::vector<BlockId> s2;
  for (int i = 0; i < 3; ++i) {
    s1.push_back(*a.allocate());
    s2.push_back(*a.allocate());
  }
  EXPECT_EQ(s1, (std::vector<BlockId>{0, 2, 4}));
  EXPECT_EQ(s2, (std::vector<BlockId>{1, 3, 5}));
  for (BlockId b : s1) ASSERT_TRUE(a.release(b));
  std::vector<BlockId> s3;
  for (int i = 0; i < 4; ++i) s3.push_back(*a.allocate());
  EXPECT_EQ(s3, (std::vector<BlockId>{6, 7, 0, 2}));
}

TEST(KvsimPrefixCache, ReusesAndEvictsLeastRecentlyReleased) {
  PrefixCache c;
  ASSERT_TRUE(c.insert(10, {0, 1}, 32));
  ASSERT_TRUE(c.insert(11, {2, 3}, 32));
  EXPECT_FALSE(c.insert(10, {7}, 16));  // already cached
  EXPECT_EQ(c.evictable_blocks(), 0U);  // both referenced by their writer
  EXPECT_EQ(c.evict_lru(), std::nullopt);
  ASSERT_TRUE(c.release(11));
  ASSERT_TRUE(c.release(10));   // 11 released first: it is the LRU one
  EXPECT_FALSE(c.release(10));  // no reference left
  EXPECT_EQ(c.evictable_blocks(), 4U);
  // A hit on 11 takes it off the eviction list; releasing it makes it most recent.
  ASSERT_TRUE(c.acquire(11));
  EXPECT_EQ(c.find(11)->refs, 1U);
  EXPECT_EQ(c.evictable_blocks(), 2U);
  ASSERT_TRUE(c.release(11));
  auto first = c.evict_lru();
  ASSERT_TRUE(first);
  EXPECT_EQ(first->hash, 10U);
  EXPECT_EQ(first->blocks, (std::vector<BlockId>{0, 1}));
  EXPECT_EQ(c.find(10), nullptr);
  ASSERT_NE(c.find(11), nullptr);
  EXPECT_EQ(c.evictable_blocks(), 2U);
  EXPECT_EQ(c.evict_lru()->hash, 11U);
  EXPECT_EQ(c.size(), 0U);
  EXPECT_FALSE(c.acquire(11));
}

class KvsimPattern : public ::testing::Test {
 protected:
  static constexpr std::uint64_t kChunk = 32 * 1024;  // 8 pages
  std::vector<std::uint64_t> words_ = std::vector<std::uint64_t>(kChunk / 8);
  std::byte* chunk() { return reinterpret_cast<std::byte*>(words_.data()); }
  const ChunkKey key_{.seed = 3, .block = 17, .generation = 2, .tensor = 5};
};

TEST_F(KvsimPattern, WrittenDataVerifies) {
  write_pattern(chunk(), key_, 0, kChunk);
  const VerifyResult r = verify_full(chunk(), key_, kChunk);
  EXPECT_EQ(r.bytes_read, kChunk);
  EXPECT_EQ(r.bad_bytes, 0U);
  EXPECT_EQ(r.first_bad, -1);
  // The same bytes under another generation (a previous owner's data) do not pass.
  ChunkKey other = key_;
  other.generation = 3;
  EXPECT_GT(verify_full(chunk(), other, kChunk).bad_bytes, kChunk * 9 / 10);
}

TEST_F(KvsimPattern, FlippedByteIsFoundWhereItIs) {
  write_pattern(chunk(), key_, 0, kChunk);
  const std::uint64_t at = 3 * 4096 + 1000 + 3;
  chunk()[at] ^= std::byte{0x01};
  const VerifyResult r = verify_full(chunk(), key_, kChunk);
  EXPECT_EQ(r.bad_bytes, 1U);
  EXPECT_EQ(r.first_bad, static_cast<std::int64_t>(at));
  EXPECT_EQ(r.expected ^ r.found, std::uint64_t{1} << 24);  // byte 3 of its word, bit 0
  // Outside the filled part nothing is checked.
  EXPECT_EQ(verify_full(chunk(), key_, 3 * 4096).bad_bytes, 0U);
}

TEST_F(KvsimPattern, SampledReadsTouchEveryPageAndRotateOntoEveryLine) {
  write_pattern(chunk(), key_, 0, kChunk);
  const VerifyResult clean = verify_sampled(chunk(), key_, kChunk, 4, 0);
  EXPECT_EQ(clean.bytes_read, 8U * 4 * 64);  // 4 lines of each of the 8 pages
  EXPECT_EQ(clean.bad_bytes, 0U);
  // A partly filled chunk: the last page holds 1000 bytes (16 lines, the last one 40 bytes),
  // still sampled; rotation 3 picks its lines 3, 7, 11 and 15.
  EXPECT_EQ(verify_sampled(chunk(), key_, 7 * 4096 + 1000, 4, 3).bytes_read,
            7U * 4 * 64 + 3 * 64 + 40);
  chunk()[5 * 4096 + 64 * 37 + 9] ^= std::byte{0xff};
  int seen = 0;
  for (std::uint64_t rot = 0; rot < 64; ++rot) {
    if (verify_sampled(chunk(), key_, kChunk, 4, rot).bad_bytes > 0) ++seen;
  }
  EXPECT_EQ(seen, 4);  // each line is picked by exactly 4 of 64 rotations
  EXPECT_EQ(verify_sampled(chunk(), key_, kChunk, 64, 0).bad_bytes, 1U);  // 64 lines = full
}

}  // namespace
}  // namespace kvtier::bench
