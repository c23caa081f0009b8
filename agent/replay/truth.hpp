#pragma once
// Ground truth in replay: kvsim's accesses records (the bytes it read from each
// block of its pool, window by window; docs/recording.md) scored against a
// placement, the replay's or the recording's.
//
//   - DRAM share of reads: each window's bytes, with the placement in force at
//     the window's midpoint, on DRAM nodes over all the bytes read from pages
//     the placement located. A block's bytes are spread evenly over its pages.
//   - Precision and recall of "on the slow tier" against "truly cold" at a
//     step, page by page: a page is truly cold when no window with its midpoint
//     in [step - cold_age, step) read its block. Judged only when the truth
//     covers that whole age.
//   - Mis-demotions: a page demoted at a step whose block a window with its
//     midpoint in [step, step + cold_age) read. Judged only when the truth covers
//     that whole age after the step.

#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <vector>

#include "agent/loop/recording.hpp"
#include "policy/types.hpp"

namespace kvtier::agent {

// A page that changed node while a PageNodes logged its changes.
struct PageChange {
  Pid pid = 0;
  std::uint64_t addr = 0;
  int from = -1;
  int to = -1;
};

// The node of every page the recording located, per process, with bytes per node.
class PageNodes {
 public:
  [[nodiscard]] int get(Pid pid, std::uint64_t addr) const {
    auto p = procs_.find(pid);
    if (p == procs_.end()) return -1;
    auto c = p->second.find(addr / kHugePageSize);
    if (c == p->second.end()) return -1;
    return c->second[(addr % kHugePageSize) / kPageSize];
  }
  void set(Pid pid, std::uint64_t addr, int node) {
    auto& chunk = chunk_of(pid, addr);
    std::int16_t& slot = chunk[(addr % kHugePageSize) / kPageSize];
    if (slot == node) return;
    if (slot >= 0) bytes_[slot] -= kPageSize;
    if (node >= 0) bytes_[node] += kPageSize;
    if (logging) changes.push_back({.pid = pid, .addr = addr, .from = slot, .to = node});
    slot = static_cast<std::int16_t>(node);
  }
  [[nodiscard]] const std::map<int, std::int64_t>& bytes() const { return bytes_; }

  bool logging = false;             // set() appends to `changes`
  std::vector<PageChange> changes;  // what set() changed while logging

 private:
  using Chunk = std::array<std::int16_t, kHugePageSize / kPageSize>;
  Chunk& chunk_of(Pid pid, std::uint64_t addr) {
    auto [it, fresh] = procs_[pid].try_emplace(addr / kHugePageSize);
    if (fresh) it->second.fill(-1);
    return it->second;
  }
  std::map<Pid, std::map<std::uint64_t, Chunk>> procs_;
  std::map<int, std::int64_t> bytes_;
};

// A placement's score against the truth; sums over steps add up.
struct TruthScore {
  double read_bytes = 0;                     // read from pages the placement located
  double dram_read_bytes = 0;                // of those, from pages on DRAM nodes
  double unplaced_read_bytes = 0;            // read from pages it did not locate (not in the share)
  std::uint64_t judged_steps = 0;            // steps where precision and recall were judged
  std::uint64_t slow_pages = 0;              // at those steps: pages on the slow tier,
  std::uint64_t cold_pages = 0;              //   pages truly cold,
  std::uint64_t slow_cold_pages = 0;         // and both
  std::uint64_t demoted_bytes = 0;           // demotions judged
  std::uint64_t misdemoted_bytes = 0;        // of those, read again within cold_age
  std::uint64_t unjudged_demoted_bytes = 0;  // the truth ends before their cold_age

  void add(const TruthScore& o);
  [[nodiscard]] double dram_share() const;
  [[nodiscard]] double precision() const;  // slow and cold / slow
  [[nodiscard]] double recall() const;     // slow and cold / cold
  [[nodiscard]] double misdemoted_share() const;
};

// True for the nodes that count as DRAM (nodes with CPUs).
using IsDram = std::function<bool(int node)>;

class TruthIndex {
 public:
  // `windows` in any order (they are sorted by time); `cold_age` defines "truly cold".
  TruthIndex(std::vector<RecAccesses> windows, TimeNs cold_age);

  [[nodiscard]] bool empty() const { return windows_.empty(); }
  [[nodiscard]] TimeNs cold_age() const { return cold_age_; }
  [[nodiscard]] std::size_t windows() const { return windows_.size(); }
  // Windows that disagree with the first one of their pid on the pool's layout (skipped).
  [[nodiscard]] std::size_t skipped() const { return skipped_; }

  // The windows whose midpoint comes before `until` and that no earlier call returned.
  std::vector<const RecAccesses*> take_until(TimeNs until);
  // Adds the window's reads to `out`, with `placement`.
  static void score_reads(const RecAccesses& w, const PageNodes& placement, const IsDram& dram,
                          TruthScore& out);
  // Precision and recall of `placement` at `now` (nothing when the truth does not cover
  // [now - cold_age, now]).
  void score_placement(const PageNodes& placement, TimeNs now, const IsDram& dram,
                       TruthScore& out) const;
  // The demotions among `changes` made at `now` (a page from a DRAM node to another node).
  void score_demotions(const std::vector<PageChange>& changes, TimeNs now, const IsDram& dram,
                       TruthScore& out) const;
  // Whether a window with its midpoint in [from, to) read the block holding `addr`.
  [[nodiscard]] bool read_between(Pid pid, std::uint64_t addr, TimeNs from, TimeNs to) const;

 private:
  struct Pool {
    std::uint64_t base = 0;
    std::uint64_t block_bytes = 0;
    std::size_t blocks = 0;
    TimeNs begin = 0;  // the truth's span for this pid
    TimeNs end = 0;
    std::vector<std::vector<TimeNs>> reads;  // per block: the midpoints of windows that read it
  };
  [[nodiscard]] const Pool* pool_of(Pid pid, std::uint64_t addr, std::size_t& block) const;

  std::vector<RecAccesses> windows_;
  std::size_t next_ = 0;
  TimeNs cold_age_ = 0;
  std::map<Pid, Pool> pools_;
  std::size_t skipped_ = 0;
};

// Every accesses record of a recording (kvsim's --truth-record file, or any recording).
std::vector<RecAccesses> truth_windows(const Recording& rec);

}  // namespace kvtier::agent
