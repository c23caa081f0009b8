// kvtierd's own memory: what it frees goes back to the kernel (it lives in the
// DRAM it manages), and what it reports is its resident set.

#include "agent/host/self_memory.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <memory>

namespace kvtier::agent {
namespace {

constexpr std::uint64_t kMiB = 1024 * 1024;

// A block touched page by page, as a step's vectors are. The stores are volatile:
// a block freed unread may otherwise lose them to the optimizer (it did at -O1
// under the sanitizers), and then nothing was ever resident.
std::unique_ptr<char[]> touched_block(std::size_t bytes) {
  auto p = std::make_unique_for_overwrite<char[]>(bytes);
  volatile char* v = p.get();
  for (std::size_t i = 0; i < bytes; i += 4096) v[i] = 1;
  return p;
}

TEST(SelfMemory, ResidentBytesFollowsTouchedMemory) {
  const std::uint64_t before = resident_bytes();
  ASSERT_GT(before, 0U);
  auto block = touched_block(32 * kMiB);
  EXPECT_GE(resident_bytes(), before + 31 * kMiB);
}

// glibc's default gives the first large block back and then raises its mmap and
// trim thresholds to that block's size, so the second one came from the heap and
// stayed resident after it was freed: the rounds after the first fail without
// return_freed_memory_promptly().
TEST(SelfMemory, FreedBlocksGoBackToTheKernelEveryTime) {
#ifdef KVTIER_SANITIZED
  GTEST_SKIP() << "the sanitizers' allocator quarantines freed memory and ignores mallopt";
#else
  ASSERT_TRUE(return_freed_memory_promptly());
  for (int round = 0; round < 3; ++round) {
    const std::uint64_t before = resident_bytes();
    {
      auto block = touched_block(16 * kMiB);
      ASSERT_GE(resident_bytes(), before + 15 * kMiB) << "round " << round;
    }
    EXPECT_LT(resident_bytes(), before + 2 * kMiB) << "round " << round;
  }
#endif
}

}  // namespace
}  // namespace kvtier::agent
