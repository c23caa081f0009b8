#pragma once
// What the simulator really did to each block: when it last touched it and how often. A
// benchmark scores a tiering daemon against this: pages the daemon moved away should be pages
// that truly were cold.
//
// Output formats (chosen by the file extension):
//   .csv  one row per chunk (a block's slice of one tensor), easy for awk in the guest:
//         block,tensor,start,end,state,last_access_ns,accesses,writes,episode_start_ns
//   else  JSON: {"pid","time_ns","pool":[start,end],"layout":{...},"blocks":[{"id","state",
//         "last_access_ns","accesses","writes","episode_start_ns","ranges":[[start,end],...]}...]}
// Files are written to PATH.tmp and renamed, so a reader never sees half a file.

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <span>
#include <string_view>
#include <vector>

#include "bench/kvsim/block_allocator.hpp"
#include "bench/kvsim/kv_pool.hpp"
#include "policy/error.hpp"
#include "policy/types.hpp"

namespace kvtier::bench {

enum class BlockState : std::uint8_t { kFree, kActive, kCached };
std::string_view block_state_name(BlockState s);

class GroundTruth {
 public:
  // Every block starts "last accessed" at `start` (when the pool was faulted in), never counted.
  // A touch after `episode_gap` or more untouched begins a new episode of use (episode_start).
  GroundTruth(std::uint32_t blocks, TimeNs start, TimeNs episode_gap);

  void touch(BlockId block, TimeNs now, bool write) {
    if (now >= last_access_[block] + episode_gap_) episode_start_[block] = now;
    last_access_[block] = now;
    ++accesses_[block];
    if (write) ++writes_[block];
    if (!mirror_.empty()) {
      std::atomic_ref<std::uint64_t>(mirror_[block]).store(now, std::memory_order_relaxed);
    }
  }
  // From now on every touch also stores the block's time in `mirror` (one word per block,
  // shared with another process: live_truth.hpp); the current times are copied in first.
  void mirror_to(std::span<std::uint64_t> mirror);
  [[nodiscard]] TimeNs last_access(BlockId b) const { return last_access_[b]; }
  // A block's episode of use starts when it is filled anew (begin_episode: taken from the
  // free list) or touched after at least the episode gap untouched. The reads early in an
  // episode are the ones no placement that waits for an access to a block can have served
  // from DRAM.
  void begin_episode(BlockId b, TimeNs now) { episode_start_[b] = now; }
  [[nodiscard]] TimeNs episode_start(BlockId b) const { return episode_start_[b]; }
  [[nodiscard]] std::uint64_t accesses(BlockId b) const { return accesses_[b]; }
  [[nodiscard]] std::uint64_t writes(BlockId b) const { return writes_[b]; }
  [[nodiscard]] std::uint32_t blocks() const {
    return static_cast<std::uint32_t>(last_access_.size());
  }

 private:
  std::vector<TimeNs> last_access_;
  std::vector<TimeNs> episode_start_;
  TimeNs episode_gap_;
  std::vector<std::uint64_t> accesses_;
  std::vector<std::uint64_t> writes_;
  std::span<std::uint64_t> mirror_;
};

struct ColdBytes {
  std::uint64_t resident = 0;     // bytes of the pool that hold pages
  std::uint64_t cold = 0;         // of those, not touched for at least the age
  std::uint64_t in_use = 0;       // bytes of blocks running sequences or the cache hold
  std::uint64_t cold_in_use = 0;  // of those, not touched for at least the age
};

// Which bytes were not touched for at least `age_ns` at `now`. `resident_only` leaves out
// blocks never touched (when the pool was not pre-faulted they have no pages yet).
ColdBytes cold_bytes(const GroundTruth& truth, std::span<const BlockState> states,
                     const PoolLayout& layout, TimeNs now, TimeNs age_ns, bool resident_only);

struct TruthContext {
  Pid pid = 0;
  TimeNs now = 0;
  AddrRange pool;
  PoolLayout layout;
};

Result<void> write_truth(const std::filesystem::path& path, const GroundTruth& truth,
                         std::span<const BlockState> states, const TruthContext& ctx);

}  // namespace kvtier::bench
