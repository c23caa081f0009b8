#pragma once
// The inference engine's memory behaviour, driven by a request trace:
//   - a request is queued when its trace time (scaled to wall time) has come, and admitted
//     first come first served while fewer than max_batch run and its blocks fit (free blocks
//     plus evictable cached prefixes, minus blocks reserved for running sequences' outputs);
//   - prefill reuses the longest cached run of leading hash ids (reading those blocks) and
//     writes the rest; the written prompt blocks go into the prefix cache under their hash id;
//   - each decode step goes layer by layer, as a model does: for every running sequence it
//     writes the new token's K and V into the last block and reads every block of the sequence;
//   - a finished sequence drops its references: its prompt blocks stay cached (LRU by hash id)
//     until evicted to make room, its output blocks are freed.
// Every read checks the pattern (pattern.hpp); blocks are checked in full when evicted or freed
// and by verify_all(). The caller passes the time to every call, so tests script it exactly.

#include <cstdint>
#include <deque>
#include <functional>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "bench/kvsim/block_allocator.hpp"
#include "bench/kvsim/ground_truth.hpp"
#include "bench/kvsim/kv_pool.hpp"
#include "bench/kvsim/model_shape.hpp"
#include "bench/kvsim/pattern.hpp"
#include "bench/kvsim/prefix_cache.hpp"
#include "bench/kvsim/trace.hpp"
#include "policy/types.hpp"

namespace kvtier::bench {

struct SimConfig {
  Scaling scaling;
  double time_scale = 1.0;           // wall seconds per trace second (0.05: an hour in 3 min)
  std::uint32_t max_batch = 32;      // running sequences at most
  std::uint64_t seed = 1;            // pattern seed and corruption-injection choice
  std::uint32_t lines_per_page = 4;  // lines checked per 4 KiB page on each read; 64 = all
  bool loop = false;                 // replay the trace when it ends
  // Every this many decode steps, ask where the pages the step reads live (0: never).
  std::uint32_t read_nodes_every = 0;
  // Those reads are also split by how long ago the block's episode of use began
  // (GroundTruth::episode_start: filled anew, or touched after episode_gap untouched): less
  // than reaction_window ago is early, the rest late.
  TimeNs episode_gap = 10'000'000'000;
  TimeNs reaction_window = 5'000'000'000;
};

// Where pages live: fills nodes[i] with the NUMA node holding pages[i] (page-aligned), or a
// negative errno when it cannot tell (not present, ...). kvsim passes move_pages(2) in query
// mode; tests script it. It is called with the step's pages right before the step reads them.
using PageNodeQuery = std::function<void(std::span<void* const> pages, std::span<int> nodes)>;

struct SimCounters {
  std::uint64_t steps = 0;    // decode steps run
  std::uint64_t arrived = 0;  // requests whose arrival time has come
  std::uint64_t admitted = 0;
  std::uint64_t finished = 0;
  std::uint64_t rejected = 0;        // needing more blocks than the whole pool
  std::uint64_t hit_blocks = 0;      // prompt blocks found in the prefix cache
  std::uint64_t miss_blocks = 0;     // prompt blocks written by prefill
  std::uint64_t evicted_groups = 0;  // cached hash blocks evicted
  std::uint64_t evicted_blocks = 0;
  std::uint64_t tokens_decoded = 0;  // simulated tokens appended
  std::uint64_t read_bytes = 0;  // KV bytes decode and prefill read (the filled part of each chunk)
  std::uint64_t loaded_bytes = 0;  // bytes of those actually loaded and checked
  std::uint64_t written_bytes = 0;
  std::uint64_t verified_bytes = 0;  // bytes checked in full (eviction, free, verify_all)
  std::uint64_t corrupted_bytes = 0;
  // Decode reads of the steps sampled with the PageNodeQuery, split by the node of each page.
  std::uint64_t node_sampled_steps = 0;
  std::uint64_t node_sampled_read_bytes = 0;
  std::vector<std::uint64_t> read_bytes_on_node;  // index: node id
  // Of those, the bytes of blocks whose episode of use began reaction_window ago or more.
  std::vector<std::uint64_t> late_read_bytes_on_node;
  std::uint64_t read_bytes_unplaced = 0;  // pages the query could not place
};

struct CorruptionReport {
  BlockId block = 0;
  std::uint32_t tensor = 0;
  std::uint64_t addr = 0;  // first bad byte
  std::uint64_t bad_bytes = 0;
  std::uint64_t expected = 0;  // the first bad 8-byte word as written and as read
  std::uint64_t found = 0;
  std::string_view when;  // "prefill", "decode", "evict", "free", "final", "injected"
};

class Simulator {
 public:
  Simulator(const SimConfig& config, Trace trace, const KvPool& pool, TimeNs start);

  // Queues the requests that have arrived by `now`, admits what fits, then runs one decode
  // step over every running sequence. True if a decode step ran.
  bool advance(TimeNs now);
  // advance() in its two halves, for a caller that lets the prefill pass take time between
  // them, as an engine's does: admit() queues and admits (the prefill: the prompt's blocks
  // written, the reused prefix read) and says how many it admitted; decode() runs the step.
  std::size_t admit(TimeNs now);
  bool decode(TimeNs now);
  // Wall time of the next arrival; nothing once the trace is used up (and not looping).
  [[nodiscard]] std::optional<TimeNs> next_arrival() const;
  // The trace is used up, nothing waits and nothing runs.
  [[nodiscard]] bool done() const;
  // Checks every word of every block in use.
  void verify_all();
  // Flips one byte of a block in use (fault injection, to prove the checks work end to end).
  // Nothing if no block holds data yet.
  std::optional<CorruptionReport> inject_corruption();
  // Corruption found since the last call.
  std::vector<CorruptionReport> take_corruptions();
  // Enables the per-node read accounting of SimConfig::read_nodes_every.
  void set_page_node_query(PageNodeQuery query) { page_nodes_ = std::move(query); }
  // Publishes every block's last access time in `times` as it changes (live_truth.hpp).
  void mirror_truth(std::span<std::uint64_t> times) { truth_.mirror_to(times); }
  // From now on, counts the bytes decode reads from each chunk (the bytes read_nodes counts),
  // for kvsim's --truth-record: one count per chunk in pool order (tensor-major: chunk i is
  // tensor i / blocks, block i % blocks, at pool start + i x chunk_bytes).
  void count_chunk_reads() {
    chunk_reads_.assign(std::size_t{layout_.tensors()} * layout_.blocks, 0);
  }
  // The counts since the last call (or count_chunk_reads()), which start again from zero.
  std::vector<std::uint64_t> take_chunk_reads() {
    std::vector<std::uint64_t> out(chunk_reads_.size(), 0);
    out.swap(chunk_reads_);
    return out;
  }

  [[nodiscard]] const SimCounters& counters() const { return counters_; }
  [[nodiscard]] const GroundTruth& truth() const { return truth_; }
  [[nodiscard]] std::span<const BlockState> states() const { return states_; }
  [[nodiscard]] std::size_t running() const { return running_.size(); }
  [[nodiscard]] std::size_t waiting() const { return waiting_.size(); }
  [[nodiscard]] std::uint32_t free_blocks() const { return alloc_.free_count(); }
  [[nodiscard]] std::size_t cached_groups() const { return cache_.size(); }
  [[nodiscard]] std::uint64_t reserved_blocks() const { return reserved_; }
  [[nodiscard]] std::uint32_t tokens_in(BlockId b) const { return meta_[b].tokens; }

 private:
  struct Pending {
    std::size_t index = 0;
    std::uint32_t pass = 0;
  };
  struct PromptGroup {
    std::uint64_t hash = 0;
    std::uint32_t tokens = 0;  // simulated tokens
    std::uint32_t blocks = 0;
    bool hit = false;
  };
  struct Sequence {
    std::vector<std::uint64_t> groups;  // prefix-cache entries it references
    std::vector<BlockId> blocks;        // every block decode reads, in token order
    std::vector<BlockId> own;           // private blocks, freed when it finishes
    std::uint32_t decode_left = 0;      // simulated tokens still to generate
    std::uint32_t decoded = 0;
    std::uint32_t reserved = 0;  // output blocks reserved, not yet taken
    BlockId tail = 0;            // the block the next token goes to
  };
  struct BlockMeta {
    std::uint32_t generation = 0;
    std::uint32_t tokens = 0;  // filled token slots
  };

  [[nodiscard]] TimeNs arrival_ns(const Pending& p) const;
  void enqueue_arrivals(TimeNs now);
  std::vector<PromptGroup> plan_prompt(const Pending& p, std::uint64_t& unreferenced_hit_blocks,
                                       std::uint32_t& miss_blocks) const;
  bool try_admit(const Pending& p, TimeNs now);
  BlockId take_block(TimeNs now);
  void evict_one(TimeNs now);
  void release_block(BlockId b, TimeNs now, std::string_view when);
  void finish(Sequence& s, TimeNs now);
  void decode_step(TimeNs now);
  [[nodiscard]] ChunkKey key(BlockId b, std::uint32_t tensor) const {
    return ChunkKey{
        .seed = config_.seed, .block = b, .generation = meta_[b].generation, .tensor = tensor};
  }
  [[nodiscard]] std::uint64_t filled_bytes(BlockId b) const {
    return std::uint64_t{meta_[b].tokens} * layout_.token_bytes;
  }
  // Sampled read of one chunk (decode and prefill reads).
  void read_chunk(BlockId b, std::uint32_t tensor, std::uint64_t rotation, std::string_view when);
  // Full check of every tensor of a block.
  void verify_block(BlockId b, std::string_view when);
  void note(const VerifyResult& r, BlockId b, std::uint32_t tensor, std::string_view when);
  // Splits the bytes this decode step is about to read by the node holding each page.
  void count_read_nodes(TimeNs now);

  SimConfig config_;
  Trace trace_;
  const KvPool& pool_;
  PoolLayout layout_;
  TimeNs start_;
  double period_s_ = 0;  // trace seconds between two replays

  BlockAllocator alloc_;
  PrefixCache cache_;
  GroundTruth truth_;
  std::vector<BlockMeta> meta_;
  std::vector<BlockState> states_;
  std::deque<Pending> waiting_;
  std::vector<Sequence> running_;
  Pending cursor_;  // the next request to arrive
  bool trace_used_up_ = false;
  std::uint64_t reserved_ = 0;
  std::uint64_t inject_rng_;
  SimCounters counters_;
  std::vector<CorruptionReport> corruptions_;
  PageNodeQuery page_nodes_;
  std::vector<void*> query_pages_;  // reused between sampled steps
  std::vector<std::uint64_t> query_bytes_;
  std::vector<std::uint64_t> query_late_bytes_;  // of query_bytes_, late in their episode
  std::vector<int> query_nodes_;
  std::vector<std::uint64_t> chunk_reads_;  // empty unless count_chunk_reads()
};

}  // namespace kvtier::bench
