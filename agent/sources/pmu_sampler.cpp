#include "agent/sources/pmu_sampler.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "agent/host/availability.hpp"
#include "agent/host/host_paths.hpp"
#include "agent/sources/bpf_skeleton.hpp"
#include "agent/sources/hotness_source.hpp"
#include "agent/sources/page_heat_maps.hpp"
#include "agent/sources/perf_events.hpp"
#include "agent/sources/probes.hpp"
#include "policy/error.hpp"
#include "policy/types.hpp"
#include "sampler.skel.h"

namespace kvtier::agent {

struct PmuSampler::Bpf {
  BpfSkeleton<sampler_bpf> skel{"PMU sampler (bpf/sampler.bpf.c)"};
  std::vector<BpfLinkPtr> links;
  PerfEventFds events;
  PageHeatMaps maps;
};

PmuSampler::PmuSampler(HostPaths paths, PmuOptions opts) : paths_(std::move(paths)), opts_(opts) {}

PmuSampler::~PmuSampler() {
  stop();
}

Result<PmuEventSpec> PmuSampler::pick_event() const {
  auto cpus = online_cpus(paths_);
  const int cpu = cpus && !cpus->empty() ? cpus->front() : 0;
  if (opts_.events == PmuEventChoice::kSoftware) {
    PmuEventSpec spec = software_page_faults_event();
    if (auto ok = try_open_event(spec, opts_.sample_period, cpu); !ok) {
      return std::unexpected(ok.error());
    }
    return spec;
  }
  const auto candidates = hardware_event_candidates(paths_, opts_.load_latency_cycles);
  if (candidates.empty()) {
    return fail(fmt::format(
        "no PMU event: no PEBS mem-loads or IBS op PMU under {} (no sampling PMU, e.g. in a VM)",
        (paths_.sys / "bus/event_source/devices").string()));
  }
  std::string errors;
  for (const auto& spec : candidates) {
    auto ok = try_open_event(spec, opts_.sample_period, cpu);
    if (ok) return spec;
    errors += (errors.empty() ? "" : "; ") + ok.error().message;
  }
  return fail(errors);
}

Availability PmuSampler::probe() const {
  if (auto a = probe_btf(paths_); !a.ok) return a;
  if (auto a = probe_bpf_privileges(); !a.ok) return a;
  auto spec = pick_event();
  if (!spec) return unavailable(spec.error().message);
  return available(fmt::format("ok: samples {} with data addresses", spec->name));
}

Result<void> PmuSampler::start() {
  if (bpf_) return {};
  auto spec = pick_event();
  if (!spec) return std::unexpected(spec.error());
  auto cpus = online_cpus(paths_);
  if (!cpus) return std::unexpected(cpus.error());

  auto b = std::make_unique<Bpf>();
  if (auto ok = b->skel.open(); !ok) return ok;
  bpf_map__set_max_entries(b->skel->maps.pages, opts_.max_pages);
  if (auto ok = b->skel.load(); !ok) return ok;

  initial_period_ = std::max<std::uint64_t>(opts_.sample_period, 1);
  auto events = open_event_per_cpu(*spec, initial_period_, *cpus);
  if (!events) return std::unexpected(events.error());
  b->events = *events;
  for (std::size_t i = 0; i < b->events.fds.size(); ++i) {
    bpf_link* link =
        bpf_program__attach_perf_event(b->skel->progs.kvt_pmu_sample, b->events.fds[i]);
    if (link == nullptr) {
      const int err = errno;
      // The links own (and closed) the fds before i; close the rest.
      for (std::size_t j = i; j < b->events.fds.size(); ++j) close(b->events.fds[j]);
      b->events.fds.resize(i);
      return fail(fmt::format("{}: attach to {} on cpu {}: {}", b->skel.what(), spec->name,
                              b->events.cpus[i], errno_text(err)),
                  err);
    }
    b->links.emplace_back(link);
  }
  b->maps = PageHeatMaps(bpf_map__fd(b->skel->maps.targets), bpf_map__fd(b->skel->maps.pages),
                         bpf_map__fd(b->skel->maps.stats), kind());
  if (auto ok = b->maps.set_targets(pending_targets_); !ok) return ok;
  period_ = initial_period_;
  event_ = *spec;
  bpf_ = std::move(b);
  spdlog::info("{}: sampling {} every {} events on {} CPUs", name(), spec->name, period_,
               cpus->size());
  return {};
}

Result<void> PmuSampler::set_targets(std::span<const Pid> pids) {
  pending_targets_.assign(pids.begin(), pids.end());
  if (!bpf_) return {};
  return bpf_->maps.set_targets(pids);
}

Result<void> PmuSampler::collect(TimeNs now, SourceBatch& out) {
  if (!bpf_) return fail(fmt::format("{}: collect() before start()", name()));
  if (auto n = bpf_->maps.drain(out); !n) return std::unexpected(n.error());
  if (opts_.adaptive) adapt_period(now);
  return {};
}

void PmuSampler::adapt_period(TimeNs now) {
  auto s = bpf_->maps.stats();
  if (!s) return;
  const std::uint64_t events = s->events - last_events_;
  const TimeNs dt = now - last_collect_;
  const bool first = last_collect_ == 0;
  last_events_ = s->events;
  last_collect_ = now;
  if (first || dt == 0) return;
  const double rate = static_cast<double>(events) * 1e9 / static_cast<double>(dt);
  const auto budget = static_cast<double>(opts_.max_samples_per_sec);
  std::uint64_t next = period_;
  if (rate > budget && period_ < opts_.max_period) {
    // Jump to the period that meets the budget at this rate, in one step.
    const double factor = std::ceil(rate / budget);
    next = std::min<std::uint64_t>(
        opts_.max_period, period_ * std::max<std::uint64_t>(2, static_cast<std::uint64_t>(factor)));
  } else if (rate < budget / 4 && period_ > initial_period_) {
    next = std::max(initial_period_, period_ / 2);
  }
  if (next == period_) return;
  if (auto ok = set_sample_period(bpf_->events, next); !ok) {
    spdlog::warn("{}: {}", name(), ok.error().message);
    return;
  }
  spdlog::debug("{}: {:.0f} samples/s, period {} -> {}", name(), rate, period_, next);
  period_ = next;
}

Result<SamplerStats> PmuSampler::stats() const {
  if (!bpf_) return fail(fmt::format("{}: not started", name()));
  return bpf_->maps.stats();
}

std::vector<int> PmuSampler::program_fds() const {
  if (!bpf_) return {};
  return {bpf_program__fd(bpf_->skel->progs.kvt_pmu_sample)};
}

void PmuSampler::stop() {
  // Links first: destroying them closes the perf events, then the skeleton.
  if (bpf_) bpf_->links.clear();
  bpf_.reset();
  event_.reset();
  last_collect_ = 0;
  last_events_ = 0;
}

}  // namespace kvtier::agent
