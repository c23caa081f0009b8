// The simulator driven by a scripted trace and scripted times: exact counts of hits, misses,
// evictions and per-block accesses, and the pattern check catching a flipped byte.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fmt/format.h>
#include <unistd.h>
#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numeric>
#include <span>
#include <string>
#include <vector>

#include "bench/kvsim/ground_truth.hpp"
#include "bench/kvsim/kv_pool.hpp"
#include "bench/kvsim/simulator.hpp"

namespace kvtier::bench {
namespace {

constexpr TimeNs kSec = 1'000'000'000ULL;
constexpr TimeNs kT0 = 1000 * kSec;

// One layer, one KV head of 256 fp16: 512 bytes a token, 8 KiB a chunk, 16 KiB a block. No
// scaling, so one hash id is 32 blocks.
ModelShape tiny_model() {
  return ModelShape{.name = "tiny", .layers = 1, .kv_heads = 1, .head_dim = 256, .dtype_bytes = 2};
}

Scaling tiny_scaling(std::uint32_t blocks) {
  auto s = choose_scaling(ScalingRequest{.model = tiny_model(),
                                         .budget_bytes = blocks * 16ULL * 1024,
                                         .capacity_tokens = blocks * 16ULL,
                                         .layer_scale = 1,
                                         .token_scale = 1});
  EXPECT_TRUE(s) << s.error().message;
  return *s;
}

Request req(double at, std::uint32_t input, std::uint32_t output, std::vector<std::uint64_t> ids) {
  return Request{
      .arrival_s = at, .input_tokens = input, .output_tokens = output, .hash_ids = std::move(ids)};
}

class KvsimSimulator : public ::testing::Test {
 protected:
  void build(std::uint32_t blocks, std::vector<Request> requests, std::uint32_t max_batch = 8,
             std::uint32_t read_nodes_every = 0) {
    scaling_ = tiny_scaling(blocks);
    layout_ =
        PoolLayout{.layers = 1, .blocks = scaling_.blocks, .chunk_bytes = 8192, .token_bytes = 512};
    auto pool = KvPool::create(layout_, PoolOptions{});
    ASSERT_TRUE(pool) << pool.error().message;
    pool_.emplace(std::move(*pool));
    sim_.emplace(SimConfig{.scaling = scaling_,
                           .time_scale = 1.0,
                           .max_batch = max_batch,
                           .lines_per_page = 4,
                           .read_nodes_every = read_nodes_every},
                 Trace{.source = "script", .requests = std::move(requests)}, *pool_, kT0);
  }
  Scaling scaling_;
  PoolLayout layout_;
  std::optional<KvPool> pool_;
  std::optional<Simulator> sim_;
};

TEST_F(KvsimSimulator, ScriptedPrefixReuseGivesExactGroundTruth) {
  // A: one full hash block (id 7), 2 output tokens. B one second later: ids 7 (shared) and 8.
  build(70, {req(0.0, 512, 2, {7}), req(1.0, 1024, 1, {7, 8})});
  Simulator& s = *sim_;

  // t0: A arrives; prefill writes blocks 0-31, decode step 1 takes block 32 for its output.
  ASSERT_TRUE(s.advance(kT0));
  EXPECT_EQ(s.running(), 1U);
  EXPECT_EQ(s.counters().miss_blocks, 32U);
  EXPECT_EQ(s.truth().accesses(0), 2U);  // written, then read by the step
  EXPECT_EQ(s.truth().writes(0), 1U);
  EXPECT_EQ(s.truth().accesses(32), 1U);
  EXPECT_EQ(s.truth().writes(32), 1U);
  EXPECT_EQ(s.tokens_in(31), 16U);
  EXPECT_EQ(s.tokens_in(32), 1U);

  // t0+10ms: step 2, A finishes: its output block is checked and freed, its prompt stays cached.
  ASSERT_TRUE(s.advance(kT0 + 10'000'000));
  EXPECT_EQ(s.running(), 0U);
  EXPECT_EQ(s.counters().finished, 1U);
  EXPECT_EQ(s.truth().accesses(0), 3U);
  EXPECT_EQ(s.truth().accesses(32), 3U);  // written, read twice... and checked when freed:
  EXPECT_EQ(s.truth().writes(32), 2U);
  EXPECT_EQ(s.states()[0], BlockState::kCached);
  EXPECT_EQ(s.states()[32], BlockState::kFree);

  // Nothing to do until B arrives.
  EXPECT_FALSE(s.advance(kT0 + kSec / 2));
  EXPECT_EQ(s.next_arrival(), kT0 + kSec);

  // t0+1s: B reuses id 7 (read once by prefill and once by its step), writes id 8 into the
  // next free blocks 33-64 and its output into 65.
  ASSERT_TRUE(s.advance(kT0 + kSec));
  EXPECT_EQ(s.counters().hit_blocks, 32U);
  EXPECT_EQ(s.counters().miss_blocks, 64U);
  EXPECT_EQ(s.truth().accesses(0), 5U);
  EXPECT_EQ(s.truth().last_access(0), kT0 + kSec);
  EXPECT_EQ(s.truth().accesses(33), 2U);
  EXPECT_EQ(s.truth().writes(33), 1U);
  EXPECT_EQ(s.truth().writes(65), 1U);
  EXPECT_EQ(s.truth().accesses(65), 2U);  // written+read, then freed (B had 1 token)
  EXPECT_EQ(s.states()[33], BlockState::kCached);
  EXPECT_EQ(s.truth().accesses(66), 0U);
  EXPECT_EQ(s.truth().last_access(66), kT0);  // never touched since the pool was made
  EXPECT_TRUE(s.done());
  EXPECT_EQ(s.counters().steps, 3U);
  EXPECT_EQ(s.counters().tokens_decoded, 3U);
  EXPECT_EQ(s.counters().corrupted_bytes, 0U);

  // Cold figures follow the truth: at t0+10.5s blocks 0-31 and 33-65 were touched 9.5 s ago,
  // the rest (block 32 at t0+10ms, blocks 66-69 never) 10 s ago or more.
  const ColdBytes c =
      cold_bytes(s.truth(), s.states(), layout_, kT0 + 10 * kSec + kSec / 2, 10 * kSec, false);
  EXPECT_EQ(c.resident, 70U * 16384);
  EXPECT_EQ(c.cold, 5U * 16384);
  EXPECT_EQ(c.in_use, 64U * 16384);
  EXPECT_EQ(c.cold_in_use, 0U);
  const ColdBytes later =
      cold_bytes(s.truth(), s.states(), layout_, kT0 + 11 * kSec, 10 * kSec, false);
  EXPECT_EQ(later.cold, 70U * 16384);  // exactly 10 s counts as cold
  EXPECT_EQ(later.cold_in_use, 64U * 16384);
}

TEST_F(KvsimSimulator, EvictsTheLeastRecentlyUsedPrefixWhenFull) {
  // 70 blocks: after A (ids 1) and B (id 2) 64 blocks are cached; C (id 3) needs 33 and so
  // evicts id 1, the least recently released.
  build(70, {req(0.0, 512, 1, {1}), req(1.0, 512, 1, {2}), req(2.0, 512, 1, {3})});
  Simulator& s = *sim_;
  ASSERT_TRUE(s.advance(kT0));
  ASSERT_TRUE(s.advance(kT0 + kSec));
  EXPECT_EQ(s.counters().evicted_blocks, 0U);
  EXPECT_EQ(s.cached_groups(), 2U);
  ASSERT_TRUE(s.advance(kT0 + 2 * kSec));
  EXPECT_EQ(s.counters().evicted_groups, 1U);
  EXPECT_EQ(s.counters().evicted_blocks, 32U);
  EXPECT_EQ(s.cached_groups(), 2U);
  EXPECT_EQ(s.counters().miss_blocks, 96U);
  EXPECT_EQ(s.counters().hit_blocks, 0U);
  // Id 1's blocks (0-31) were checked in full when evicted and now hold id 3's data.
  EXPECT_GE(s.counters().verified_bytes, 32U * 16384);
  EXPECT_EQ(s.counters().corrupted_bytes, 0U);
  s.verify_all();
  EXPECT_EQ(s.counters().corrupted_bytes, 0U);
}

TEST_F(KvsimSimulator, AdmissionWaitsForMemoryAndBatchSlots) {
  // Max batch 1: B waits while A runs (3 steps), then runs.
  build(100, {req(0.0, 100, 3, {1}), req(0.0, 100, 2, {2})}, 1);
  Simulator& s = *sim_;
  ASSERT_TRUE(s.advance(kT0));
  EXPECT_EQ(s.running(), 1U);
  EXPECT_EQ(s.waiting(), 1U);
  ASSERT_TRUE(s.advance(kT0 + 1));
  ASSERT_TRUE(s.advance(kT0 + 2));
  EXPECT_EQ(s.running(), 0U);
  EXPECT_EQ(s.waiting(), 1U);
  ASSERT_TRUE(s.advance(kT0 + 3));
  EXPECT_EQ(s.waiting(), 0U);
  EXPECT_EQ(s.counters().admitted, 2U);

  // A request larger than the whole pool is dropped, not left blocking the queue.
  build(40, {req(0.0, 1024, 1, {1, 2}), req(0.0, 100, 1, {3})});
  ASSERT_TRUE(sim_->advance(kT0));
  EXPECT_EQ(sim_->counters().rejected, 1U);
  EXPECT_EQ(sim_->counters().admitted, 1U);
}

TEST_F(KvsimSimulator, LengthOnlyTracesShareNothing) {
  // Azure-style requests without hash ids: identical lengths, still no hits.
  build(200, {req(0.0, 600, 1, {}), req(1.0, 600, 1, {})});
  ASSERT_TRUE(sim_->advance(kT0));
  ASSERT_TRUE(sim_->advance(kT0 + kSec));
  EXPECT_EQ(sim_->counters().hit_blocks, 0U);
  EXPECT_EQ(sim_->counters().miss_blocks, 2U * (32 + 6));  // 512 + 88 tokens each
}

TEST_F(KvsimSimulator, FlippedByteIsReportedWithItsAddress) {
  build(70, {req(0.0, 512, 50, {7})});
  Simulator& s = *sim_;
  ASSERT_TRUE(s.advance(kT0));
  auto injected = s.inject_corruption();
  ASSERT_TRUE(injected);
  // Sampled reads may miss one byte for a while; the full check at the end never does.
  for (int i = 1; i < 10; ++i) s.advance(kT0 + static_cast<TimeNs>(i));
  s.verify_all();
  EXPECT_GE(s.counters().corrupted_bytes, 1U);
  const auto reports = s.take_corruptions();
  ASSERT_FALSE(reports.empty());
  EXPECT_EQ(reports.back().addr, injected->addr);
  EXPECT_EQ(reports.back().block, injected->block);
  EXPECT_EQ(reports.back().when, "final");
  EXPECT_TRUE(s.take_corruptions().empty());
}

TEST_F(KvsimSimulator, ReadBytesAreSplitByTheNodeOfEachPage) {
  // One 512-token prompt (32 full blocks of 8 KiB chunks = 2 pages each), 3 output tokens;
  // every second step is sampled. The scripted query puts tensor 1 on node 1, tensor 0 on
  // node 0, and cannot place the page of the output block in tensor 0.
  build(70, {req(0.0, 512, 3, {7})}, 8, 2);
  Simulator& s = *sim_;
  const auto t1 = reinterpret_cast<std::uintptr_t>(pool_->chunk(0, 1));
  std::vector<std::size_t> batch_sizes;
  bool aligned = true;
  s.set_page_node_query([&](std::span<void* const> pages, std::span<int> nodes) {
    batch_sizes.push_back(pages.size());
    for (std::size_t i = 0; i < pages.size(); ++i) {
      const auto a = reinterpret_cast<std::uintptr_t>(pages[i]);
      aligned = aligned && a % 4096 == 0;
      const bool output_page = a == reinterpret_cast<std::uintptr_t>(pool_->chunk(32, 0));
      nodes[i] = output_page ? -14 : (a >= t1 ? 1 : 0);
    }
  });
  ASSERT_TRUE(s.advance(kT0));  // step 0: sampled; block 32 holds 1 token (512 bytes)
  EXPECT_TRUE(aligned);
  ASSERT_EQ(batch_sizes, std::vector<std::size_t>{2 * (32 * 2 + 1)});
  const SimCounters& c = s.counters();
  EXPECT_EQ(c.node_sampled_steps, 1U);
  EXPECT_EQ(c.node_sampled_read_bytes, c.read_bytes);  // no prefill read: all decode
  ASSERT_EQ(c.read_bytes_on_node.size(), 2U);
  EXPECT_EQ(c.read_bytes_on_node[0], 32U * 8192);
  EXPECT_EQ(c.read_bytes_on_node[1], 32U * 8192 + 512);
  EXPECT_EQ(c.read_bytes_unplaced, 512U);

  ASSERT_TRUE(s.advance(kT0 + 1));  // step 1: not sampled
  EXPECT_EQ(c.node_sampled_steps, 1U);
  EXPECT_LT(c.node_sampled_read_bytes, c.read_bytes);
  ASSERT_TRUE(s.advance(kT0 + 2));  // step 2: sampled, block 32 now holds 3 tokens
  EXPECT_EQ(c.node_sampled_steps, 2U);
  EXPECT_EQ(batch_sizes.size(), 2U);
  EXPECT_EQ(c.read_bytes_on_node[1], 2 * 32U * 8192 + 512 + 3 * 512);
  EXPECT_EQ(c.read_bytes_unplaced, 512U + 3 * 512);
  EXPECT_EQ(c.node_sampled_read_bytes,
            c.read_bytes_on_node[0] + c.read_bytes_on_node[1] + c.read_bytes_unplaced);
}

// A block's episode of use starts when it is filled or when it comes back after the episode
// gap (10 s): its reads are early for the reaction window (5 s), late after.
TEST_F(KvsimSimulator, ReadsAreLateOnceTheBlocksEpisodeOfUseIsAReactionWindowOld) {
  // A fills hash block 7 (32 blocks) at t0 and decodes 3 tokens (t0, +3 s, +6 s); B reuses
  // block 7 at +20 s, 14 s after A last read it, with a new hash block 8. All on node 1.
  build(80, {req(0.0, 512, 3, {7}), req(20.0, 1024, 8, {7, 8})}, 8, 1);
  Simulator& s = *sim_;
  s.set_page_node_query(
      [](std::span<void* const> /*pages*/, std::span<int> nodes) { std::ranges::fill(nodes, 1); });
  const SimCounters& c = s.counters();
  std::uint64_t total = 0;
  std::uint64_t late = 0;
  // The step at `at` read `bytes` from node 1, `late_bytes` of them late.
  const auto step = [&](TimeNs at, std::uint64_t bytes, std::uint64_t late_bytes) {
    ASSERT_TRUE(s.advance(kT0 + at));
    ASSERT_EQ(c.read_bytes_on_node.size(), 2U);
    ASSERT_EQ(c.late_read_bytes_on_node.size(), 2U);
    EXPECT_EQ(c.read_bytes_on_node[1] - total, bytes) << "at +" << at / kSec << " s";
    EXPECT_EQ(c.late_read_bytes_on_node[1] - late, late_bytes) << "at +" << at / kSec << " s";
    EXPECT_EQ(c.late_read_bytes_on_node[0], 0U);
    total = c.read_bytes_on_node[1];
    late = c.late_read_bytes_on_node[1];
  };
  constexpr std::uint64_t kPrompt = 2 * 32 * 8192;  // 32 full blocks, 2 tensors
  step(0, kPrompt + 2 * 512, 0);                    // filled now: early
  step(3 * kSec, kPrompt + 2 * 1024, 0);            // 3 s into the episode
  // 6 s: late. Had the touches at +3 s begun an episode (they came 3 s after the last, less
  // than the gap), these reads would be early.
  step(6 * kSec, kPrompt + 2 * 1536, kPrompt + 2 * 1536);
  // B: block 7 is back after 14 s idle, block 8 and the output block are filled now.
  step(20 * kSec, 2 * kPrompt + 2 * 512, 0);
  step(24 * kSec, 2 * kPrompt + 2 * 1024, 0);
  step(25 * kSec, 2 * kPrompt + 2 * 1536, 2 * kPrompt + 2 * 1536);
  EXPECT_EQ(c.node_sampled_read_bytes, c.read_bytes_on_node[1]);
}

// --truth-record's counts: the bytes decode read from each chunk, in pool order (tensor-major),
// the same bytes read_nodes counts.
TEST_F(KvsimSimulator, ChunkReadsAreTheBytesReadNodesCounts) {
  build(70, {req(0.0, 512, 3, {7})}, 8, 1);
  Simulator& s = *sim_;
  s.set_page_node_query(
      [](std::span<void* const> /*pages*/, std::span<int> nodes) { std::ranges::fill(nodes, 0); });
  s.count_chunk_reads();
  const auto sum = [](const std::vector<std::uint64_t>& v) {
    return std::accumulate(v.begin(), v.end(), std::uint64_t{0});
  };
  ASSERT_TRUE(s.advance(kT0));  // 32 full prompt blocks and 1 token of block 32, 2 tensors
  auto reads = s.take_chunk_reads();
  ASSERT_EQ(reads.size(), 2U * 70);
  EXPECT_EQ(sum(reads), s.counters().node_sampled_read_bytes);
  EXPECT_EQ(reads[0], 8192U);
  EXPECT_EQ(reads[70], 8192U) << "block 0 in tensor 1";
  EXPECT_EQ(reads[32], 512U);
  EXPECT_EQ(reads[70 + 32], 512U);
  EXPECT_EQ(reads[33], 0U);
  const std::uint64_t before = s.counters().node_sampled_read_bytes;
  ASSERT_TRUE(s.advance(kT0 + 1));
  reads = s.take_chunk_reads();
  EXPECT_EQ(sum(reads), s.counters().node_sampled_read_bytes - before);
  EXPECT_EQ(reads[32], 1024U) << "2 tokens now";
  EXPECT_EQ(sum(s.take_chunk_reads()), 0U) << "taken: counted afresh";
}

TEST_F(KvsimSimulator, GroundTruthFilesDescribeEveryChunk) {
  build(70, {req(0.0, 512, 2, {7})});
  ASSERT_TRUE(sim_->advance(kT0));
  const auto dir =
      std::filesystem::temp_directory_path() / ("kvsim_truth_" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  const TruthContext ctx{.pid = 42, .now = kT0 + 5, .pool = pool_->range(), .layout = layout_};

  ASSERT_TRUE(write_truth(dir / "t.csv", sim_->truth(), sim_->states(), ctx));
  std::ifstream csv(dir / "t.csv");
  std::string line;
  std::getline(csv, line);
  EXPECT_EQ(line, "block,tensor,start,end,state,last_access_ns,accesses,writes,episode_start_ns");
  std::getline(csv, line);
  EXPECT_EQ(line, fmt::format("0,0,{},{},active,{},2,1,{}", ctx.pool.start, ctx.pool.start + 8192,
                              kT0, kT0));
  int rows = 1;
  while (std::getline(csv, line)) ++rows;
  EXPECT_EQ(rows, 70 * 2);

  ASSERT_TRUE(write_truth(dir / "t.json", sim_->truth(), sim_->states(), ctx));
  std::ifstream js(dir / "t.json");
  const auto j = nlohmann::json::parse(js);
  EXPECT_EQ(j["pid"], 42);
  EXPECT_EQ(j["pool"][0], ctx.pool.start);
  EXPECT_EQ(j["layout"]["tensors"], 2);
  ASSERT_EQ(j["blocks"].size(), 70U);
  const auto& b32 = j["blocks"][32];
  EXPECT_EQ(b32["state"], "active");
  EXPECT_EQ(b32["accesses"], 1);
  EXPECT_EQ(b32["episode_start_ns"], kT0);
  EXPECT_EQ(b32["ranges"][1][0], ctx.pool.start + layout_.tensor_bytes() + 32 * 8192);
  EXPECT_EQ(j["blocks"][40]["state"], "free");
  EXPECT_FALSE(std::filesystem::exists(dir / "t.json.tmp"));

  auto bad = write_truth(dir / "no/such/dir/t.csv", sim_->truth(), sim_->states(), ctx);
  ASSERT_FALSE(bad);
  EXPECT_THAT(bad.error().message, ::testing::HasSubstr("cannot write ground truth"));
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace kvtier::bench
