#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "bench/kvsim/model_shape.hpp"

namespace kvtier::bench {
namespace {

using ::testing::HasSubstr;

constexpr std::uint64_t kMiB = 1ULL << 20;

TEST(KvsimModel, PresetsMatchTheReadme) {
  const ModelShape m8 = model_preset("llama3-8b").value();
  EXPECT_EQ(m8.kv_bytes_per_token(), 128U * 1024);
  EXPECT_EQ(m8.chunk_bytes(), 32U * 1024);  // 64 KiB per layer for K+V
  const ModelShape m70 = model_preset("llama3-70b").value();
  EXPECT_EQ(m70.kv_bytes_per_token(), 320U * 1024);
  EXPECT_EQ(m70.chunk_bytes(), 32U * 1024);
  EXPECT_FALSE(model_preset("gpt-5"));
  EXPECT_EQ(dtype_bytes("bf16").value(), 2U);
  EXPECT_EQ(dtype_bytes("fp8").value(), 1U);
  EXPECT_FALSE(dtype_bytes("int3"));
}

TEST(KvsimModel, ParsesSizes) {
  EXPECT_EQ(parse_size("512MiB").value(), 512 * kMiB);
  EXPECT_EQ(parse_size("1GiB").value(), 1024 * kMiB);
  EXPECT_EQ(parse_size("64K").value(), 64U * 1024);
  EXPECT_EQ(parse_size("4096").value(), 4096U);
  EXPECT_EQ(parse_size("2GB").value(), 2048 * kMiB);
  EXPECT_FALSE(parse_size("MiB"));
  EXPECT_FALSE(parse_size("12 parsecs"));
  EXPECT_FALSE(parse_size("99999999999T"));
}

TEST(KvsimModel, FoldsLayersFirstThenTokens) {
  // 2M tokens of Llama-3-8B = 256 GiB; 512 MiB is 512x smaller: 32 layers into 1, then 16
  // real tokens a simulated one.
  auto s = choose_scaling(ScalingRequest{.model = model_preset("llama3-8b").value(),
                                         .budget_bytes = 512 * kMiB,
                                         .capacity_tokens = 2ULL << 20});
  ASSERT_TRUE(s) << s.error().message;
  EXPECT_EQ(s->layer_scale, 32U);
  EXPECT_EQ(s->sim_layers, 1U);
  EXPECT_EQ(s->token_scale, 16U);
  EXPECT_EQ(s->block_bytes(), 64U * 1024);
  EXPECT_EQ(s->blocks, 8192U);
  EXPECT_EQ(s->pool_bytes, 512 * kMiB);
  EXPECT_EQ(s->capacity_tokens, 2ULL << 20);
  EXPECT_EQ(s->blocks_per_hash(), 2U);
  EXPECT_EQ(s->sim_tokens(1000), 63U);
}

TEST(KvsimModel, NoScalingWhenTheBudgetSuffices) {
  // 16K tokens of 8B = 2 GiB.
  auto s = choose_scaling(ScalingRequest{.model = model_preset("llama3-8b").value(),
                                         .budget_bytes = 2048 * kMiB,
                                         .capacity_tokens = 16384});
  ASSERT_TRUE(s) << s.error().message;
  EXPECT_EQ(s->layer_scale, 1U);
  EXPECT_EQ(s->token_scale, 1U);
  EXPECT_EQ(s->sim_layers, 32U);
  EXPECT_EQ(s->blocks, 1024U);
  EXPECT_EQ(s->blocks_per_hash(), 32U);
}

TEST(KvsimModel, PartialLayerFoldUsesADivisor) {
  // 70B over 3x too little memory: the largest divisor of 80 not above 3 is 2, then tokens x2.
  auto s = choose_scaling(ScalingRequest{.model = model_preset("llama3-70b").value(),
                                         .budget_bytes = 320 * 1024 * 1024ULL,
                                         .capacity_tokens = 3072});
  ASSERT_TRUE(s) << s.error().message;
  EXPECT_EQ(s->layer_scale, 2U);
  EXPECT_EQ(s->token_scale, 2U);
  EXPECT_EQ(s->sim_layers, 40U);
}

TEST(KvsimModel, TooSmallBudgetShrinksCapacityOrFails) {
  auto s = choose_scaling(ScalingRequest{.model = model_preset("llama3-8b").value(),
                                         .budget_bytes = 64 * kMiB,
                                         .capacity_tokens = 2ULL << 20});
  ASSERT_TRUE(s) << s.error().message;
  EXPECT_EQ(s->token_scale, kMaxTokenScale);
  EXPECT_EQ(s->capacity_tokens, 1024ULL * 16 * 32);  // less than asked, and said so
  auto tiny = choose_scaling(ScalingRequest{
      .model = model_preset("llama3-8b").value(), .budget_bytes = 1000, .capacity_tokens = 1000});
  ASSERT_FALSE(tiny);
  EXPECT_THAT(tiny.error().message, HasSubstr("raise the budget"));
}

TEST(KvsimModel, RejectsBadForcedScalesAndShapes) {
  ModelShape m = model_preset("llama3-8b").value();
  auto bad_layers = choose_scaling(ScalingRequest{
      .model = m, .budget_bytes = 512 * kMiB, .capacity_tokens = 1024, .layer_scale = 3});
  ASSERT_FALSE(bad_layers);
  EXPECT_THAT(bad_layers.error().message, HasSubstr("--layer-scale 3 must divide"));
  auto bad_tokens = choose_scaling(ScalingRequest{
      .model = m, .budget_bytes = 512 * kMiB, .capacity_tokens = 1024, .token_scale = 3});
  ASSERT_FALSE(bad_tokens);
  EXPECT_THAT(bad_tokens.error().message, HasSubstr("--token-scale 3"));
  m.head_dim = 3;
  m.kv_heads = 1;
  m.dtype_bytes = 1;
  auto odd = choose_scaling(ScalingRequest{.model = m, .budget_bytes = kMiB, .capacity_tokens = 1});
  ASSERT_FALSE(odd);
  EXPECT_THAT(odd.error().message, HasSubstr("multiple of 8"));
}

}  // namespace
}  // namespace kvtier::bench
