#include "policy/kv_size.hpp"

#include <gtest/gtest.h>

namespace kvtier::policy {
namespace {

constexpr std::uint64_t kKiB = 1ULL << 10;
constexpr std::uint64_t kGiB = 1ULL << 30;

TEST(KvSize, Llama70bWithoutGqa) {
  const KvShape mha{.layers = 80, .kv_heads = 64, .head_dim = 128};
  EXPECT_EQ(*kv_cache_bytes(mha, KvDtype::kFp16, 64 * kKiB, 1), 160 * kGiB);
  EXPECT_EQ(*kv_cache_bytes(mha, KvDtype::kFp16, 128 * kKiB, 1), 320 * kGiB);
  // The preset is the same shape.
  const auto* preset = find_kv_preset("llama3-70b-mha");
  ASSERT_NE(preset, nullptr);
  EXPECT_EQ(*kv_cache_bytes(*preset, KvDtype::kFp16, 64 * kKiB, 1), 160 * kGiB);
}

TEST(KvSize, Llama70bWithGqaIs320KiBPerToken) {
  const auto* p = find_kv_preset("llama3-70b");
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(*kv_bytes_per_token(*p, KvDtype::kFp16), 320 * kKiB);
  // design.md: 64 sequences of 32K tokens need 640 GiB.
  EXPECT_EQ(*kv_cache_bytes(*p, KvDtype::kFp16, 32 * kKiB, 64), 640 * kGiB);
}

TEST(KvSize, DtypeScalesLinearly) {
  const auto* p = find_kv_preset("llama3-8b");
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(*kv_bytes_per_token(*p, KvDtype::kFp16), 128 * kKiB);
  EXPECT_EQ(*kv_bytes_per_token(*p, KvDtype::kBf16), 128 * kKiB);
  EXPECT_EQ(*kv_bytes_per_token(*p, KvDtype::kFp8), 64 * kKiB);
  EXPECT_EQ(*kv_bytes_per_token(*p, KvDtype::kFp32), 256 * kKiB);
}

TEST(KvSize, EveryPresetHasAPositiveSize) {
  EXPECT_GE(kv_presets().size(), 6U);
  for (const auto& p : kv_presets()) {
    auto b = kv_bytes_per_token(p, KvDtype::kFp16);
    ASSERT_TRUE(b) << p.name;
    EXPECT_EQ(*b % 1024, 0U) << p.name;
  }
  EXPECT_EQ(*kv_bytes_per_token(*find_kv_preset("llama3-405b"), KvDtype::kFp16), 504 * kKiB);
  EXPECT_EQ(*kv_bytes_per_token(*find_kv_preset("qwen2-7b"), KvDtype::kFp16), 56 * kKiB);
  EXPECT_EQ(find_kv_preset("gpt-5"), nullptr);
}

TEST(KvSize, ZeroAndOverflowAreErrors) {
  EXPECT_FALSE(
      kv_bytes_per_token(KvShape{.layers = 0, .kv_heads = 8, .head_dim = 128}, KvDtype::kFp16));
  const KvShape big{.layers = 1ULL << 20, .kv_heads = 1ULL << 20, .head_dim = 1ULL << 20};
  auto r = kv_cache_bytes(big, KvDtype::kFp32, 1ULL << 20, 1);
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("overflow"), std::string::npos);
  EXPECT_FALSE(kv_cache_bytes(*find_kv_preset("llama3-8b"), KvDtype::kFp16, 0, 1));
}

TEST(KvSize, SplitFillsDramThenCxl) {
  auto s = split_kv(100, 30, 50);
  EXPECT_EQ(s.dram_bytes, 30U);
  EXPECT_EQ(s.cxl_bytes, 50U);
  EXPECT_EQ(s.unplaced_bytes, 20U);
  s = split_kv(10, 30, 50);
  EXPECT_EQ(s.dram_bytes, 10U);
  EXPECT_EQ(s.cxl_bytes, 0U);
  EXPECT_EQ(s.unplaced_bytes, 0U);
}

TEST(KvSize, HumanBytes) {
  EXPECT_EQ(human_bytes(160 * kGiB), "160 GiB");
  EXPECT_EQ(human_bytes(320 * kKiB), "320 KiB");
  EXPECT_EQ(human_bytes(5ULL << 19), "2.5 MiB");
  EXPECT_EQ(human_bytes(17), "17 B");
  EXPECT_EQ(human_bytes(1536 * kGiB), "1.5 TiB");
}

TEST(KvSize, ParseCountsAndSizes) {
  EXPECT_EQ(*parse_count("64K"), 65536U);
  EXPECT_EQ(*parse_count("128k"), 131072U);
  EXPECT_EQ(*parse_count("1M"), 1048576U);
  EXPECT_EQ(*parse_count("4096"), 4096U);
  EXPECT_FALSE(parse_count("64KB"));
  EXPECT_FALSE(parse_count("K"));
  EXPECT_FALSE(parse_count("-1"));
  EXPECT_EQ(*parse_bytes("64G"), 64 * kGiB);
  EXPECT_EQ(*parse_bytes("64GiB"), 64 * kGiB);
  EXPECT_EQ(*parse_bytes("512MB"), 512ULL << 20);
  EXPECT_EQ(*parse_bytes("100B"), 100U);
  EXPECT_FALSE(parse_bytes("64X"));
  EXPECT_FALSE(parse_bytes("99999999999T"));
  EXPECT_EQ(*parse_kv_dtype("bf16"), KvDtype::kBf16);
  EXPECT_FALSE(parse_kv_dtype("int4"));
}

}  // namespace
}  // namespace kvtier::policy
