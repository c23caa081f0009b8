#pragma once
// The return watch: memory kvtier demoted, armed in the fault sampler's BPF
// map (bpf/faults.bpf.c) in chunks of 1 << KVT_RETURN_SHIFT bytes. The first
// fault of a target in an armed chunk (a NUMA hint fault on the slow node, a
// first touch, a write-protect fault) disarms it and reports it through a ring
// buffer, whose epoll fd wakes the daemon: its promotion tick then runs within
// [daemon] promote_wake instead of at its next interval. The evidence itself is
// the fault sampler's page map (every faulting page, as ever): the watch only
// says when to look, so kvtierd promotes what the workload touched from its
// own thread, about as soon as the kernel would in the fault path, and the
// kernel need not copy anything in the workload's time.

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "policy/error.hpp"
#include "policy/types.hpp"

struct ring_buffer;

namespace kvtier::agent {

struct ReturnWatchStats {
  std::uint64_t armed = 0;     // chunk arms since start (re-arms included)
  std::uint64_t disarmed = 0;  // chunks disarmed because kvtier promoted them
  std::uint64_t returns = 0;   // reports taken (chunks touched while armed)
  std::uint64_t failed = 0;    // arms the kernel refused (counted, never fatal)
};

// What the control loop uses: arm after a demotion, disarm after a promotion,
// the fd that wakes it, the counts.
class ReturnWatch {
 public:
  virtual ~ReturnWatch() = default;
  ReturnWatch() = default;
  ReturnWatch(const ReturnWatch&) = delete;
  ReturnWatch& operator=(const ReturnWatch&) = delete;

  static std::uint64_t chunk_bytes();
  // Arms every chunk that `ranges` (kvtier's demotion of them) overlap.
  virtual void arm(Pid pid, std::span<const AddrRange> ranges) = 0;
  // Disarms every chunk that `ranges` (kvtier's promotion of them) overlap.
  virtual void disarm(Pid pid, std::span<const AddrRange> ranges) = 0;
  // Readable while reports wait.
  [[nodiscard]] virtual int epoll_fd() const = 0;
  [[nodiscard]] virtual const ReturnWatchStats& stats() const = 0;
};

// The watch in the fault sampler's BPF object.
class BpfReturnWatch final : public ReturnWatch {
 public:
  // `map_fd`: the LRU hash of armed chunks; `ring_fd`: the ring buffer of reports.
  static Result<std::unique_ptr<BpfReturnWatch>> create(int map_fd, int ring_fd);
  ~BpfReturnWatch() override;
  BpfReturnWatch(const BpfReturnWatch&) = delete;
  BpfReturnWatch& operator=(const BpfReturnWatch&) = delete;

  void arm(Pid pid, std::span<const AddrRange> ranges) override;
  void disarm(Pid pid, std::span<const AddrRange> ranges) override;
  [[nodiscard]] int epoll_fd() const override;
  [[nodiscard]] const ReturnWatchStats& stats() const override { return stats_; }
  // Drops the chunks of every process not in `pids` (sorted).
  void keep_only(std::span<const Pid> pids) const;
  // Takes the reports waiting (so the fd is quiet again); returns how many.
  Result<std::size_t> drain();

 private:
  BpfReturnWatch(int map_fd, ring_buffer* ring) : map_fd_(map_fd), ring_(ring) {}
  static int on_event(void* ctx, void* data, std::size_t size);
  void update(Pid pid, std::span<const AddrRange> ranges, bool arm);

  int map_fd_ = -1;
  ring_buffer* ring_ = nullptr;
  ReturnWatchStats stats_;
};

}  // namespace kvtier::agent
