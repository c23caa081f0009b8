#pragma once
// The fault sampler: a raw tracepoint program on exceptions:page_fault_user
// (bpf/faults.bpf.c) counting every user page fault of target processes per
// (tgid, page). With NUMA balancing on, the kernel's hint faults make it a
// sampler of hot pages; without, it sees first touches and copy-on-write.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "agent/host/host_paths.hpp"
#include "agent/sources/hotness_source.hpp"
#include "agent/sources/page_heat_maps.hpp"

namespace kvtier::agent {

struct FaultOptions {
  // Distinct pages the in-kernel map holds between two drains (the promotion
  // tick, every second by default). The LRU hash is preallocated: 65536 pages
  // take 7.9 MB of kernel memory (262144 took 31.5 MB, `bpftool map show`),
  // on the DRAM node kvtier is there to keep for the inference server.
  std::uint32_t max_pages = 65536;
  // Chunks of demoted memory the return watch holds (return_watch.hpp): 65536
  // of 64 KiB cover 4 GiB; beyond that the longest-armed are forgotten first.
  // 0: no return watch.
  std::uint32_t max_return_chunks = 65536;
};

class FaultSampler final : public HotnessSource {
 public:
  FaultSampler(HostPaths paths, FaultOptions opts);
  ~FaultSampler() override;

  [[nodiscard]] SourceKind kind() const override { return SourceKind::kFault; }
  [[nodiscard]] Availability probe() const override;
  Result<void> start() override;
  Result<void> set_targets(std::span<const Pid> pids) override;
  Result<void> collect(TimeNs now, SourceBatch& out) override;
  ReturnWatch* return_watch() override;
  void stop() override;

  [[nodiscard]] Result<SamplerStats> stats() const;
  [[nodiscard]] std::vector<int> program_fds() const;

 private:
  struct Bpf;
  HostPaths paths_;
  FaultOptions opts_;
  std::unique_ptr<Bpf> bpf_;
  std::vector<Pid> pending_targets_;
};

}  // namespace kvtier::agent
