#include "agent/sources/fault_sampler.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <span>
#include <utility>
#include <vector>

#include "agent/host/availability.hpp"
#include "agent/host/host_paths.hpp"
#include "agent/host/sysfs.hpp"
#include "agent/sources/bpf_skeleton.hpp"
#include "agent/sources/hotness_source.hpp"
#include "agent/sources/page_heat_maps.hpp"
#include "agent/sources/probes.hpp"
#include "agent/sources/return_watch.hpp"
#include "faults.skel.h"
#include "policy/error.hpp"
#include "policy/types.hpp"

namespace kvtier::agent {

struct FaultSampler::Bpf {
  BpfSkeleton<faults_bpf> skel{"fault sampler (bpf/faults.bpf.c)"};
  PageHeatMaps maps;
  std::unique_ptr<BpfReturnWatch> returns;
};

FaultSampler::FaultSampler(HostPaths paths, FaultOptions opts)
    : paths_(std::move(paths)), opts_(opts) {}

FaultSampler::~FaultSampler() {
  stop();
}

Availability FaultSampler::probe() const {
  if (auto a = probe_btf(paths_); !a.ok) return a;
  if (auto a = probe_bpf_privileges(); !a.ok) return a;
  if (auto a = probe_tracepoint(paths_, "exceptions", "page_fault_user"); !a.ok) return a;
  auto mode = read_u64(paths_.proc / "sys/kernel/numa_balancing");
  if (mode && *mode != 0) {
    return available(
        fmt::format("ok: user page faults including NUMA hint faults (numa_balancing={})", *mode));
  }
  return available(
      "ok: user page faults; numa_balancing is off, so first touches and copy-on-write only");
}

Result<void> FaultSampler::start() {
  if (bpf_) return {};
  auto b = std::make_unique<Bpf>();
  if (auto ok = b->skel.open(); !ok) return ok;
  bpf_map__set_max_entries(b->skel->maps.pages, opts_.max_pages);
  bpf_map__set_max_entries(b->skel->maps.returns,
                           std::max<std::uint32_t>(opts_.max_return_chunks, 1));
  if (auto ok = b->skel.load(); !ok) return ok;
  if (auto ok = b->skel.attach(); !ok) return ok;
  b->maps = PageHeatMaps(bpf_map__fd(b->skel->maps.targets), bpf_map__fd(b->skel->maps.pages),
                         bpf_map__fd(b->skel->maps.stats), SourceKind::kFault);
  if (auto ok = b->maps.set_targets(pending_targets_); !ok) return ok;
  if (opts_.max_return_chunks > 0) {
    auto w = BpfReturnWatch::create(bpf_map__fd(b->skel->maps.returns),
                                    bpf_map__fd(b->skel->maps.return_events));
    if (!w) return std::unexpected(w.error());
    b->returns = std::move(*w);
  }
  bpf_ = std::move(b);
  spdlog::info("faults: attached to exceptions:page_fault_user{}",
               opts_.max_return_chunks > 0 ? "; return watch on" : "");
  return {};
}

Result<void> FaultSampler::set_targets(std::span<const Pid> pids) {
  pending_targets_.assign(pids.begin(), pids.end());
  if (!bpf_) return {};
  if (auto ok = bpf_->maps.set_targets(pids); !ok) return ok;
  if (bpf_->returns) bpf_->returns->keep_only(bpf_->maps.targets());
  return {};
}

Result<void> FaultSampler::collect(TimeNs /*now*/, SourceBatch& out) {
  if (!bpf_) return fail("faults: collect() before start()");
  auto n = bpf_->maps.drain(out);
  if (!n) return std::unexpected(n.error());
  if (bpf_->returns) {
    if (auto r = bpf_->returns->drain(); !r) return std::unexpected(r.error());
  }
  return {};
}

ReturnWatch* FaultSampler::return_watch() {
  return bpf_ ? bpf_->returns.get() : nullptr;
}

Result<SamplerStats> FaultSampler::stats() const {
  if (!bpf_) return fail("faults: not started");
  return bpf_->maps.stats();
}

std::vector<int> FaultSampler::program_fds() const {
  if (!bpf_) return {};
  return {bpf_program__fd(bpf_->skel->progs.kvt_fault_user)};
}

void FaultSampler::stop() {
  bpf_.reset();
}

}  // namespace kvtier::agent
