#pragma once
// The PMU sampler: a perf_event BPF program (bpf/sampler.bpf.c) on one
// sampling event per CPU, counting samples per (tgid, page) of target
// processes in the kernel. The event is the best the machine offers (PEBS
// load latency, IBS op) or the software page-faults event, which runs the
// same program anywhere. The sampling period adapts so the sample rate, and
// with it the overhead, stays under a budget.

#include <bpf/libbpf.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "agent/host/host_paths.hpp"
#include "agent/sources/hotness_source.hpp"
#include "agent/sources/page_heat_maps.hpp"
#include "agent/sources/perf_events.hpp"

namespace kvtier::agent {

enum class PmuEventChoice : std::uint8_t {
  kHardware,  // PEBS or IBS only
  kSoftware,  // the software page-faults event only
};

struct PmuOptions {
  PmuEventChoice events = PmuEventChoice::kHardware;
  // Events per sample (the config's sources.sample_period).
  std::uint64_t sample_period = 1000;
  bool adaptive = true;
  // Sample budget across all CPUs, checked at each collect(): above it the
  // period grows at once to what meets the budget at the rate just seen;
  // below a quarter of it the period halves back toward the initial one.
  std::uint64_t max_samples_per_sec = 20000;
  std::uint64_t max_period = 1ULL << 24;
  std::uint32_t load_latency_cycles = 30;
  // Distinct pages the in-kernel map holds between two drains (the promotion
  // tick, every second by default). The LRU hash is preallocated: 65536 pages
  // take 7.9 MB of kernel memory (262144 took 31.5 MB, `bpftool map show`),
  // on the DRAM node kvtier is there to keep for the inference server.
  std::uint32_t max_pages = 65536;
};

struct LinkDeleter {
  void operator()(bpf_link* l) const { bpf_link__destroy(l); }
};
using BpfLinkPtr = std::unique_ptr<bpf_link, LinkDeleter>;

class PmuSampler final : public HotnessSource {
 public:
  PmuSampler(HostPaths paths, PmuOptions opts);
  ~PmuSampler() override;

  // kPmu for the hardware events, kPmuSoft for the software one.
  [[nodiscard]] SourceKind kind() const override {
    return opts_.events == PmuEventChoice::kSoftware ? SourceKind::kPmuSoft : SourceKind::kPmu;
  }
  [[nodiscard]] Availability probe() const override;
  Result<void> start() override;
  Result<void> set_targets(std::span<const Pid> pids) override;
  Result<void> collect(TimeNs now, SourceBatch& out) override;
  void stop() override;

  // After start(): the event sampled and the current period.
  [[nodiscard]] const std::optional<PmuEventSpec>& event() const { return event_; }
  [[nodiscard]] std::uint64_t sample_period() const { return period_; }
  [[nodiscard]] Result<SamplerStats> stats() const;
  [[nodiscard]] std::vector<int> program_fds() const;

 private:
  [[nodiscard]] Result<PmuEventSpec> pick_event() const;
  void adapt_period(TimeNs now);

  struct Bpf;
  HostPaths paths_;
  PmuOptions opts_;
  std::unique_ptr<Bpf> bpf_;
  std::optional<PmuEventSpec> event_;
  std::uint64_t initial_period_ = 1;
  std::uint64_t period_ = 1;
  std::vector<Pid> pending_targets_;
  TimeNs last_collect_ = 0;
  std::uint64_t last_events_ = 0;
};

}  // namespace kvtier::agent
