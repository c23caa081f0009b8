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
  std::uint32_t max_pages = 262144;
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
