#include "bench/kvsim/simulator.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <utility>

namespace kvtier::bench {

namespace {

// Hash ids for traces without prefix information: unique per request and replay, so nothing is
// shared, and far above any id a Mooncake trace uses.
std::uint64_t private_hash(std::size_t index, std::uint32_t pass, std::size_t group) {
  return (1ULL << 63) | (std::uint64_t{pass} << 48) | (std::uint64_t{index} << 16) | group;
}

std::uint32_t blocks_for(std::uint32_t tokens) {
  return (tokens + kBlockTokens - 1) / kBlockTokens;
}

}  // namespace

Simulator::Simulator(const SimConfig& config, Trace trace, const KvPool& pool, TimeNs start)
    : config_(config),
      trace_(std::move(trace)),
      pool_(pool),
      layout_(pool.layout()),
      start_(start),
      alloc_(pool.layout().blocks),
      truth_(pool.layout().blocks, start, config.episode_gap),
      meta_(pool.layout().blocks),
      states_(pool.layout().blocks, BlockState::kFree),
      inject_rng_(config.seed) {
  const std::size_t n = trace_.requests.size();
  const double span = trace_.span_s();
  // One mean inter-arrival gap between the last request of a pass and the first of the next.
  period_s_ = n > 1 && span > 0 ? span + span / static_cast<double>(n - 1) : span + 1.0;
  trace_used_up_ = n == 0;
}

TimeNs Simulator::arrival_ns(const Pending& p) const {
  const double trace_s = period_s_ * p.pass + trace_.requests[p.index].arrival_s;
  return start_ + static_cast<TimeNs>(std::llround(trace_s * config_.time_scale * 1e9));
}

std::optional<TimeNs> Simulator::next_arrival() const {
  if (trace_used_up_) return std::nullopt;
  return arrival_ns(cursor_);
}

bool Simulator::done() const {
  return trace_used_up_ && waiting_.empty() && running_.empty();
}

void Simulator::enqueue_arrivals(TimeNs now) {
  while (!trace_used_up_ && arrival_ns(cursor_) <= now) {
    waiting_.push_back(cursor_);
    ++counters_.arrived;
    if (++cursor_.index == trace_.requests.size()) {
      if (config_.loop) {
        cursor_.index = 0;
        ++cursor_.pass;
      } else {
        trace_used_up_ = true;
      }
    }
  }
}

std::vector<Simulator::PromptGroup> Simulator::plan_prompt(const Pending& p,
                                                           std::uint64_t& unreferenced_hit_blocks,
                                                           std::uint32_t& miss_blocks) const {
  const Request& r = trace_.requests[p.index];
  const Scaling& sc = config_.scaling;
  const std::size_t groups =
      (std::size_t{r.input_tokens} + kHashBlockTokens - 1) / kHashBlockTokens;
  std::vector<PromptGroup> out;
  out.reserve(groups);
  unreferenced_hit_blocks = 0;
  miss_blocks = 0;
  bool hitting = true;
  for (std::size_t g = 0; g < groups; ++g) {
    const std::uint32_t real = std::min<std::uint32_t>(
        kHashBlockTokens, r.input_tokens - static_cast<std::uint32_t>(g) * kHashBlockTokens);
    PromptGroup pg{.hash = r.hash_ids.empty() ? private_hash(p.index, p.pass, g) : r.hash_ids[g],
                   .tokens = sc.sim_tokens(real)};
    pg.blocks = blocks_for(pg.tokens);
    // A prefix is reused only up to the first block the cache lacks, as vLLM matches it.
    const CachedPrefix* c = hitting ? cache_.find(pg.hash) : nullptr;
    pg.hit = c != nullptr && c->tokens >= pg.tokens;
    if (pg.hit) {
      pg.blocks = static_cast<std::uint32_t>(c->blocks.size());
      if (c->refs == 0) unreferenced_hit_blocks += pg.blocks;
    } else {
      hitting = false;
      miss_blocks += pg.blocks;
    }
    out.push_back(pg);
  }
  return out;
}

BlockId Simulator::take_block(TimeNs now) {
  while (alloc_.free_count() == 0) evict_one(now);
  const auto b = alloc_.allocate();
  if (!b) throw std::logic_error("kvsim: free list empty after eviction");
  ++meta_[*b].generation;
  meta_[*b].tokens = 0;
  truth_.begin_episode(*b, now);
  states_[*b] = BlockState::kActive;
  return *b;
}

void Simulator::evict_one(TimeNs now) {
  auto ev = cache_.evict_lru();
  // Admission counted evictable blocks, so running dry here is a bookkeeping bug.
  if (!ev) throw std::logic_error("kvsim: no block free or evictable (admission accounting bug)");
  ++counters_.evicted_groups;
  counters_.evicted_blocks += ev->blocks.size();
  for (BlockId b : ev->blocks) release_block(b, now, "evict");
}

void Simulator::release_block(BlockId b, TimeNs now, std::string_view when) {
  // The check reads the whole block; record it, as the kernel sees it. The block is about to
  // be rewritten by its next owner anyway, as a real eviction would.
  verify_block(b, when);
  truth_.touch(b, now, false);
  states_[b] = BlockState::kFree;
  if (!alloc_.release(b)) throw std::logic_error("kvsim: block released twice");
}

bool Simulator::try_admit(const Pending& p, TimeNs now) {
  std::uint64_t pinned_hits = 0;
  std::uint32_t miss_blocks = 0;
  std::vector<PromptGroup> groups = plan_prompt(p, pinned_hits, miss_blocks);
  const Request& r = trace_.requests[p.index];
  const std::uint32_t out_tokens = config_.scaling.sim_tokens(r.output_tokens);
  const std::uint32_t out_blocks = blocks_for(out_tokens);

  std::uint64_t prompt_blocks = 0;
  for (const PromptGroup& g : groups) prompt_blocks += g.blocks;
  if (prompt_blocks + out_blocks > layout_.blocks) {
    ++counters_.rejected;
    return true;  // can never fit: dropped, the queue moves on
  }
  const std::uint64_t available =
      std::uint64_t{alloc_.free_count()} + cache_.evictable_blocks() - pinned_hits;
  if (available < reserved_ + miss_blocks + out_blocks) return false;

  Sequence s{.decode_left = out_tokens, .reserved = out_blocks};
  reserved_ += out_blocks;
  const std::uint64_t tb = layout_.token_bytes;
  for (const PromptGroup& g : groups) {
    if (g.hit) {
      cache_.acquire(g.hash);
      s.groups.push_back(g.hash);
      const CachedPrefix* c = cache_.find(g.hash);
      for (BlockId b : c->blocks) {
        states_[b] = BlockState::kActive;
        // Prefill attends over the reused prefix: one read of it.
        for (std::uint32_t t = 0; t < layout_.tensors(); ++t) {
          read_chunk(b, t, counters_.admitted, "prefill");
        }
        truth_.touch(b, now, false);
        s.blocks.push_back(b);
      }
      counters_.hit_blocks += c->blocks.size();
      continue;
    }
    std::vector<BlockId> blocks;
    std::uint32_t left = g.tokens;
    for (std::uint32_t i = 0; i < g.blocks; ++i) {
      const BlockId b = take_block(now);
      const std::uint32_t n = std::min(left, kBlockTokens);
      left -= n;
      meta_[b].tokens = n;
      for (std::uint32_t t = 0; t < layout_.tensors(); ++t) {
        write_pattern(pool_.chunk(b, t), key(b, t), 0, n * tb);
      }
      counters_.written_bytes += n * tb * layout_.tensors();
      truth_.touch(b, now, true);
      blocks.push_back(b);
      s.blocks.push_back(b);
    }
    counters_.miss_blocks += blocks.size();
    // The cache may already hold this id (a shorter tail, or a prefix after a miss): then the
    // blocks stay private to this sequence.
    if (cache_.insert(g.hash, blocks, g.tokens)) {
      s.groups.push_back(g.hash);
    } else {
      s.own.insert(s.own.end(), blocks.begin(), blocks.end());
    }
  }
  ++counters_.admitted;
  if (s.decode_left == 0) {
    finish(s, now);
  } else {
    running_.push_back(std::move(s));
  }
  return true;
}

void Simulator::finish(Sequence& s, TimeNs now) {
  for (std::uint64_t h : s.groups) {
    cache_.release(h);
    const CachedPrefix* c = cache_.find(h);
    if (c != nullptr && c->refs == 0) {
      for (BlockId b : c->blocks) states_[b] = BlockState::kCached;
    }
  }
  for (BlockId b : s.own) release_block(b, now, "free");
  reserved_ -= s.reserved;
  s.reserved = 0;
  ++counters_.finished;
}

void Simulator::note(const VerifyResult& r, BlockId b, std::uint32_t tensor,
                     std::string_view when) {
  if (r.bad_bytes == 0) return;
  counters_.corrupted_bytes += r.bad_bytes;
  corruptions_.push_back(CorruptionReport{.block = b,
                                          .tensor = tensor,
                                          .addr = pool_.range().start + layout_.offset(b, tensor) +
                                                  static_cast<std::uint64_t>(r.first_bad),
                                          .bad_bytes = r.bad_bytes,
                                          .expected = r.expected,
                                          .found = r.found,
                                          .when = when});
}

void Simulator::read_chunk(BlockId b, std::uint32_t tensor, std::uint64_t rotation,
                           std::string_view when) {
  const std::uint64_t filled = filled_bytes(b);
  const VerifyResult r = verify_sampled(pool_.chunk(b, tensor), key(b, tensor), filled,
                                        config_.lines_per_page, rotation + b * 7ULL + tensor);
  counters_.read_bytes += filled;
  counters_.loaded_bytes += r.bytes_read;
  note(r, b, tensor, when);
}

void Simulator::verify_block(BlockId b, std::string_view when) {
  for (std::uint32_t t = 0; t < layout_.tensors(); ++t) {
    const VerifyResult r = verify_full(pool_.chunk(b, t), key(b, t), filled_bytes(b));
    counters_.verified_bytes += r.bytes_read;
    note(r, b, t, when);
  }
}

void Simulator::decode_step(TimeNs now) {
  // The slot each sequence's new token goes to; a full tail block means a fresh one.
  for (Sequence& s : running_) {
    if (s.decoded % kBlockTokens == 0) {
      --s.reserved;
      --reserved_;
      s.tail = take_block(now);
      s.own.push_back(s.tail);
      s.blocks.push_back(s.tail);
    }
    ++meta_[s.tail].tokens;
  }
  if (config_.read_nodes_every > 0 && page_nodes_ &&
      counters_.steps % config_.read_nodes_every == 0) {
    count_read_nodes(now);
  }
  const std::uint64_t tb = layout_.token_bytes;
  const std::uint64_t step = counters_.steps;
  for (std::uint32_t t = 0; t < layout_.tensors(); ++t) {
    for (const Sequence& s : running_) {
      const std::uint64_t slot = meta_[s.tail].tokens - 1;
      write_pattern(pool_.chunk(s.tail, t), key(s.tail, t), slot * tb, (slot + 1) * tb);
      counters_.written_bytes += tb;
      for (BlockId b : s.blocks) {
        read_chunk(b, t, step, "decode");
        if (!chunk_reads_.empty()) {
          chunk_reads_[std::size_t{t} * layout_.blocks + b] += filled_bytes(b);
        }
      }
    }
  }
  for (Sequence& s : running_) {
    for (BlockId b : s.blocks) truth_.touch(b, now, b == s.tail);
    ++s.decoded;
    --s.decode_left;
    ++counters_.tokens_decoded;
    if (s.decode_left == 0) finish(s, now);
  }
  std::erase_if(running_, [](const Sequence& s) { return s.decode_left == 0; });
  ++counters_.steps;
}

void Simulator::count_read_nodes(TimeNs now) {
  constexpr std::uint64_t kPage = 4096;
  query_pages_.clear();
  query_bytes_.clear();
  query_late_bytes_.clear();
  // The same bytes read_chunk() counts: the filled part of every chunk of every running
  // sequence, page by page (a page read by two sequences counts twice, as its bytes do).
  for (std::uint32_t t = 0; t < layout_.tensors(); ++t) {
    for (const Sequence& s : running_) {
      for (BlockId b : s.blocks) {
        const TimeNs episode = truth_.episode_start(b);
        const bool late = now >= episode && now - episode >= config_.reaction_window;
        std::byte* const chunk = pool_.chunk(b, t);
        const auto begin = reinterpret_cast<std::uintptr_t>(chunk);
        const std::uintptr_t end = begin + filled_bytes(b);
        for (std::uintptr_t a = begin; a < end;) {
          const std::uintptr_t page = a & ~(std::uintptr_t{kPage} - 1);
          const std::uintptr_t next = std::min<std::uintptr_t>(page + kPage, end);
          // The page start as a pointer into the pool (it may lie before the chunk's start).
          void* const page_ptr = chunk - static_cast<std::ptrdiff_t>(begin - page);
          if (!query_pages_.empty() && query_pages_.back() == page_ptr) {
            query_bytes_.back() += next - a;  // two chunks sharing a page (chunks < 4 KiB)
          } else {
            query_pages_.push_back(page_ptr);
            query_bytes_.push_back(next - a);
            query_late_bytes_.push_back(0);
          }
          if (late) query_late_bytes_.back() += next - a;
          a = next;
        }
      }
    }
  }
  query_nodes_.assign(query_pages_.size(), -1);
  page_nodes_(query_pages_, query_nodes_);
  ++counters_.node_sampled_steps;
  for (std::size_t i = 0; i < query_pages_.size(); ++i) {
    counters_.node_sampled_read_bytes += query_bytes_[i];
    const int node = query_nodes_[i];
    if (node < 0) {
      counters_.read_bytes_unplaced += query_bytes_[i];
      continue;
    }
    const auto n = static_cast<std::size_t>(node);
    if (counters_.read_bytes_on_node.size() <= n) {
      counters_.read_bytes_on_node.resize(n + 1, 0);
      counters_.late_read_bytes_on_node.resize(n + 1, 0);
    }
    counters_.read_bytes_on_node[n] += query_bytes_[i];
    counters_.late_read_bytes_on_node[n] += query_late_bytes_[i];
  }
}

bool Simulator::advance(TimeNs now) {
  admit(now);
  return decode(now);
}

std::size_t Simulator::admit(TimeNs now) {
  enqueue_arrivals(now);
  const std::uint64_t before = counters_.admitted;
  while (!waiting_.empty() && running_.size() < config_.max_batch) {
    if (!try_admit(waiting_.front(), now)) break;
    waiting_.pop_front();
  }
  return counters_.admitted - before;
}

bool Simulator::decode(TimeNs now) {
  if (running_.empty()) return false;
  decode_step(now);
  return true;
}

void Simulator::verify_all() {
  for (BlockId b = 0; b < layout_.blocks; ++b) {
    if (states_[b] != BlockState::kFree) verify_block(b, "final");
  }
}

std::optional<CorruptionReport> Simulator::inject_corruption() {
  std::vector<BlockId> candidates;
  for (BlockId b = 0; b < layout_.blocks; ++b) {
    if (states_[b] != BlockState::kFree && meta_[b].tokens > 0) candidates.push_back(b);
  }
  if (candidates.empty()) return std::nullopt;
  inject_rng_ = pattern_word(inject_rng_, 1);
  const BlockId b = candidates[inject_rng_ % candidates.size()];
  const std::uint32_t tensor = static_cast<std::uint32_t>((inject_rng_ >> 20) % layout_.tensors());
  const std::uint64_t offset = (inject_rng_ >> 32) % filled_bytes(b);
  std::byte* p = pool_.chunk(b, tensor) + offset;
  *p ^= std::byte{0x5a};
  return CorruptionReport{.block = b,
                          .tensor = tensor,
                          .addr = pool_.range().start + layout_.offset(b, tensor) + offset,
                          .bad_bytes = 1,
                          .when = "injected"};
}

std::vector<CorruptionReport> Simulator::take_corruptions() {
  return std::exchange(corruptions_, {});
}

}  // namespace kvtier::bench
