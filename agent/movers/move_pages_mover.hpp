#pragma once
// The mover that calls move_pages(2) itself: pages are first located (a status
// query; move_located() skips it, its caller has just read them), those
// elsewhere are moved in batches, failures are retried a few times, and every
// page ends in exactly one MoveStats counter: requested == moved +
// already_there + busy + pinned + not_present + gone + no_memory + permission +
// other + partial_huge. The status queries after the first look are the
// per-page statuses nothing else gives: which pages of a batch the kernel left
// unwritten (a pinned page fails its whole batch) and which moved before the
// node ran out of memory.
//
// Pinned vs busy: the kernel gives a long-term pinned page no status of its
// own; migration of the batch holding it fails (the call returns a positive
// count and leaves that batch's statuses unwritten). A page left unmoved by
// every one of `max_attempts` move calls, with no -EBUSY in between, is taken
// as pinned and skipped for `pinned_ttl_ns`; a page whose last status was
// -EBUSY/-EAGAIN counts as busy and is tried again on the next move().
// last_errno is the last errno seen, including ones a retry then overcame.
// Not thread-safe: one mover per thread.

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string_view>
#include <utility>
#include <vector>

#include "agent/host/clock.hpp"
#include "agent/host/host_paths.hpp"
#include "agent/host/huge_pages.hpp"
#include "agent/host/move_pages_call.hpp"
#include "agent/movers/move_units.hpp"
#include "agent/movers/mover.hpp"
#include "agent/movers/node_full_latch.hpp"
#include "agent/movers/pinned_set.hpp"

namespace kvtier::agent {

struct MovePagesConfig {
  // Move units (a small page or a whole huge page) per move_pages call. The
  // sweep in bench/mover_bench.cpp is flat from 256 up (within the guest's
  // noise); 1024 keeps calls few and budget steps small (4 MiB of 4 KiB pages).
  std::size_t batch_units = 1024;
  // Move calls per batch before what is left counts as busy or pinned.
  int max_attempts = 3;
  // MPOL_MF_MOVE_ALL: also move pages shared with other processes (needs
  // CAP_SYS_NICE); without it those pages count as `permission`.
  bool move_shared = false;
  // How long a page that failed every attempt is skipped.
  TimeNs pinned_ttl_ns = 600'000'000'000ULL;
  // How long demotion to a CPU-less node stays off after it ran out of memory
  // (a node with CPUs is tried again at the next call).
  TimeNs node_full_retry_ns = 60'000'000'000ULL;
};

// Everything the mover touches, injectable for unit tests.
struct MovePagesDeps {
  MovePagesFn move_pages = system_move_pages();
  // nullptr: every page is moved as a small page.
  std::shared_ptr<HugePageProbe> huge = std::make_shared<KpageflagsHugeProbe>();
  Clock clock = monotonic_now;
  HostPaths host;
};

class MovePagesMover final : public Mover {
 public:
  explicit MovePagesMover(MovePagesConfig config, MovePagesDeps deps = {});

  [[nodiscard]] std::string_view name() const override { return "move_pages"; }
  MoveStats move(Pid pid, std::span<const AddrRange> ranges, int to_node) override;
  MoveStats move_located(Pid pid, std::span<const AddrRange> ranges, int to_node,
                         std::span<const std::uint64_t> huge_blocks) override;

  std::vector<std::pair<Pid, AddrRange>> take_refused() override;

  PinnedSet& pinned() { return pinned_; }
  NodeFullLatch& node_full() { return node_full_; }
  [[nodiscard]] const MovePagesConfig& config() const { return config_; }

 private:
  enum class Stop : std::uint8_t { kNo, kGone, kNoMemory, kPermission, kOther };
  struct Batch;

  MoveStats move_units(Pid pid, std::vector<MoveUnit> units, int to_node, bool located,
                       MoveStats st);
  Stop move_batch(Pid pid, std::span<const MoveUnit> units, int to_node, bool located,
                  MoveStats& st);
  Stop locate(Batch& b, bool first);
  Stop move_once(Batch& b, bool& out_of_memory);
  Stop node_ran_full(Batch& b);
  bool latches(int node);
  void settle(Batch& b);
  void fill_addrs(const Batch& b);
  Stop give_up(Batch& b, int err);
  Stop call_failed(Pid pid, int err, MoveStats& st);
  bool process_gone(Pid pid) const;
  static std::uint64_t& counter_for(Stop stop, MoveStats& st);

  MovePagesConfig config_;
  MovePagesDeps deps_;
  PinnedSet pinned_;
  NodeFullLatch node_full_;
  std::map<int, bool> cpu_less_;                    // per node: latches when full
  std::vector<std::pair<Pid, AddrRange>> refused_;  // since the last take_refused()
  // Scratch buffers reused across batches.
  std::vector<void*> addrs_;
  std::vector<int> nodes_;
  std::vector<int> status_;
};

// True when /proc/PID is missing, or the task is exiting (PF_EXITING) or a
// zombie: move_pages answers ESRCH for the first and EINVAL (no mm) for the others.
bool process_exited(const HostPaths& host, Pid pid);

}  // namespace kvtier::agent
