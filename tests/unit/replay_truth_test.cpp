// Ground truth in replay (agent/replay/truth.hpp): kvsim's accesses records as
// the recording format carries them, and the scores of a placement built by
// hand against reads built by hand, figure by figure.

#include "agent/replay/truth.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "agent/loop/recording.hpp"

namespace kvtier::agent {
namespace {

using ::testing::HasSubstr;

constexpr TimeNs kSec = 1'000'000'000;
constexpr Pid kPid = 321;
constexpr std::uint64_t kBase = 0x10000000;  // 2 MiB aligned
constexpr std::uint64_t kBlock = 4 * kPageSize;

// The bytes of a one-record recording (header, frame, payload), as a writer makes them.
std::vector<std::uint8_t> file_of(const Record& r) {
  std::vector<std::uint8_t> out(16, 0);
  std::memcpy(out.data(), kRecordingMagic, 8);
  out[8] = kRecordingVersion;
  const auto payload = encode(r);
  out.push_back(static_cast<std::uint8_t>(type_of(r)));
  const auto len = static_cast<std::uint32_t>(payload.size());
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<std::uint8_t>(len >> (8 * i)));
  out.insert(out.end(), payload.begin(), payload.end());
  return out;
}

TEST(Truth, AccessesAreWrittenSparseWhenThatIsSmallerAndReadBackTheSame) {
  RecAccesses few{.pid = kPid,
                  .begin = 5 * kSec,
                  .end = 6 * kSec,
                  .base = kBase,
                  .block_bytes = kBlock,
                  .bytes_read = std::vector<std::uint64_t>(1000, 0)};
  few.bytes_read[3] = 4096;
  few.bytes_read[999] = 1;
  EXPECT_EQ(type_of(few), RecordType::kAccessesSparse);
  EXPECT_EQ(encode(few).size(), 36U + 4 + 4 + 2 * 12) << "two blocks of 1000";
  RecAccesses all = few;
  std::ranges::fill(all.bytes_read, 7);
  EXPECT_EQ(type_of(all), RecordType::kAccesses);
  EXPECT_EQ(encode(all).size(), 36U + 4 + 1000 * 8);
  for (const RecAccesses& r : {few, all}) {
    auto back = parse_recording(file_of(r), "t.kvtrec");
    ASSERT_TRUE(back) << back.error().message;
    ASSERT_EQ(back->records.size(), 1U);
    const auto& got = std::get<RecAccesses>(back->records[0]);
    EXPECT_EQ(got.pid, r.pid);
    EXPECT_EQ(got.begin, r.begin);
    EXPECT_EQ(got.end, r.end);
    EXPECT_EQ(got.base, r.base);
    EXPECT_EQ(got.block_bytes, r.block_bytes);
    EXPECT_EQ(got.bytes_read, r.bytes_read);
  }
  // A sparse entry naming a block past the pool is malformed, not a write out of bounds.
  auto bytes = file_of(few);
  bytes[bytes.size() - 12] = 0xff;
  bytes[bytes.size() - 11] = 0xff;
  auto bad = parse_recording(bytes, "bad.kvtrec");
  ASSERT_FALSE(bad);
  EXPECT_THAT(bad.error().message, HasSubstr("malformed record (type 11)"));
}

// Four blocks of four pages from kBase, 1 s windows from 100 s: block 0 read in every one of
// six windows (16 KiB each), block 2 once, in the second; blocks 1 and 3 never.
std::vector<RecAccesses> six_windows() {
  std::vector<RecAccesses> out;
  for (int w = 5; w >= 0; --w) {  // any order: the index sorts them
    RecAccesses r{.pid = kPid,
                  .begin = (100 + w) * kSec,
                  .end = (101 + w) * kSec,
                  .base = kBase,
                  .block_bytes = kBlock,
                  .bytes_read = {16384, 0, w == 1 ? 8192U : 0U, 0}};
    out.push_back(r);
  }
  return out;
}

const IsDram kNode0IsDram = [](int node) { return node == 0; };

// Blocks 0 and 1 on node 0, blocks 2 and 3 on node 1, and block 0's last page on node 1.
PageNodes hand_placement() {
  PageNodes p;
  for (std::uint64_t page = 0; page < 16; ++page) {
    p.set(kPid, kBase + page * kPageSize, page < 8 && page != 3 ? 0 : 1);
  }
  return p;
}

TEST(Truth, ScoresAHandBuiltPlacementExactly) {
  TruthIndex truth(six_windows(), 3 * kSec);
  ASSERT_EQ(truth.windows(), 6U);
  const PageNodes placement = hand_placement();

  // DRAM share: every window's bytes, spread over the block's pages, by their node.
  TruthScore reads;
  auto first = truth.take_until(102 * kSec);
  ASSERT_EQ(first.size(), 2U) << "midpoints 100.5 and 101.5";
  EXPECT_EQ(first[0]->begin, 100 * kSec);
  for (const auto* w : first) TruthIndex::score_reads(*w, placement, kNode0IsDram, reads);
  for (const auto* w : truth.take_until(~TimeNs{0})) {
    TruthIndex::score_reads(*w, placement, kNode0IsDram, reads);
  }
  EXPECT_TRUE(truth.take_until(~TimeNs{0}).empty()) << "each window is taken once";
  // 6 x 16 KiB from block 0 (a quarter of it on node 1) and 8 KiB from block 2 (node 1).
  EXPECT_EQ(reads.read_bytes, 6 * 16384.0 + 8192.0);
  EXPECT_EQ(reads.dram_read_bytes, 6 * 12288.0);
  EXPECT_EQ(reads.dram_share(), 73728.0 / 106496.0);
  EXPECT_EQ(reads.unplaced_read_bytes, 0.0);

  // Precision and recall at 106 s: truly cold = not read in [103 s, 106 s): blocks 1, 2, 3
  // (12 pages); on node 1: blocks 2 and 3 and one page of block 0 (9 pages).
  TruthScore at;
  truth.score_placement(placement, 106 * kSec, kNode0IsDram, at);
  EXPECT_EQ(at.judged_steps, 1U);
  EXPECT_EQ(at.cold_pages, 12U);
  EXPECT_EQ(at.slow_pages, 9U);
  EXPECT_EQ(at.slow_cold_pages, 8U);
  EXPECT_EQ(at.precision(), 8.0 / 9.0);
  EXPECT_EQ(at.recall(), 8.0 / 12.0);
  // Not judged where the truth does not cover the whole cold age: before 103 s, after 106 s.
  TruthScore early;
  truth.score_placement(placement, 102 * kSec, kNode0IsDram, early);
  truth.score_placement(placement, 107 * kSec, kNode0IsDram, early);
  EXPECT_EQ(early.judged_steps, 0U);
  EXPECT_EQ(early.slow_pages, 0U);

  // Mis-demotions: at 101 s, a page of block 2 (read at 101.5 s) and one of block 3 (never
  // read) are demoted and a page of block 1 promoted; at 104 s, a demotion the truth (ending
  // at 106 s) cannot judge.
  const std::vector<PageChange> at101{
      {.pid = kPid, .addr = kBase + 8 * kPageSize, .from = 0, .to = 1},
      {.pid = kPid, .addr = kBase + 12 * kPageSize, .from = 0, .to = 1},
      {.pid = kPid, .addr = kBase + 4 * kPageSize, .from = 1, .to = 0}};
  TruthScore dem;
  truth.score_demotions(at101, 101 * kSec, kNode0IsDram, dem);
  truth.score_demotions({{.pid = kPid, .addr = kBase, .from = 0, .to = 1}}, 104 * kSec,
                        kNode0IsDram, dem);
  EXPECT_EQ(dem.demoted_bytes, 2 * kPageSize);
  EXPECT_EQ(dem.misdemoted_bytes, kPageSize);
  EXPECT_EQ(dem.misdemoted_share(), 0.5);
  EXPECT_EQ(dem.unjudged_demoted_bytes, kPageSize);

  EXPECT_TRUE(truth.read_between(kPid, kBase + 9 * kPageSize, 101 * kSec, 102 * kSec));
  EXPECT_FALSE(truth.read_between(kPid, kBase + 9 * kPageSize, 102 * kSec, 200 * kSec));
  EXPECT_FALSE(truth.read_between(kPid + 1, kBase, 0, 200 * kSec)) << "another process";
}

TEST(Truth, PagesTheRecordingNeverLocatedAreLeftOutOfTheShare) {
  TruthIndex truth(six_windows(), 3 * kSec);
  PageNodes half;
  for (std::uint64_t page = 0; page < 2; ++page) half.set(kPid, kBase + page * kPageSize, 0);
  TruthScore reads;
  for (const auto* w : truth.take_until(~TimeNs{0})) {
    TruthIndex::score_reads(*w, half, kNode0IsDram, reads);
  }
  EXPECT_EQ(reads.read_bytes, 6 * 8192.0);
  EXPECT_EQ(reads.dram_share(), 1.0);
  EXPECT_EQ(reads.unplaced_read_bytes, 6 * 8192.0 + 8192.0);
}

TEST(Truth, TheWindowsOfARecordingAreItsAccessesRecords) {
  Recording rec;
  rec.records.emplace_back(RecStep{.now = kSec});
  for (const auto& w : six_windows()) rec.records.emplace_back(w);
  rec.records.emplace_back(RecStep{.now = 2 * kSec});
  const auto windows = truth_windows(rec);
  ASSERT_EQ(windows.size(), 6U);
  EXPECT_EQ(windows.front().begin, 105 * kSec) << "in the recording's order";
}

}  // namespace
}  // namespace kvtier::agent
