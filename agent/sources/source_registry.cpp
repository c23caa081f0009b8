#include "agent/sources/source_registry.hpp"

#include <algorithm>
#include <cerrno>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "agent/host/availability.hpp"
#include "agent/host/host_paths.hpp"
#include "agent/sources/damon_source.hpp"
#include "agent/sources/fault_sampler.hpp"
#include "agent/sources/idle_page_source.hpp"
#include "agent/sources/pmu_sampler.hpp"
#include "agent/sources/soft_dirty_source.hpp"
#include "policy/config.hpp"
#include "policy/error.hpp"
#include "policy/types.hpp"

namespace kvtier::agent {

const SourceFactory* SourceRegistry::find(SourceKind kind) const {
  for (const auto& f : factories_) {
    if (f.kind == kind) return &f;
  }
  return nullptr;
}

void register_builtin_sources(SourceRegistry& reg, const HostPaths& paths,
                              const SourceOptions& opts) {
  reg.add(SourceFactory{
      .kind = SourceKind::kPmu,
      .summary = "PMU samples with data addresses (Intel PEBS load latency, AMD IBS op) via BPF",
      .make = [paths, o = opts.pmu] { return std::make_unique<PmuSampler>(paths, o); }});
  reg.add(SourceFactory{
      .kind = SourceKind::kDamon,
      .summary = "DAMON vaddr region access counts via the damon_aggregated tracepoint",
      .make = [paths, o = opts.damon] { return std::make_unique<DamonSource>(paths, o); }});
  reg.add(SourceFactory{
      .kind = SourceKind::kFault,
      .summary = "user page faults incl. NUMA hint faults via the page_fault_user tracepoint",
      .make = [paths, o = opts.faults] { return std::make_unique<FaultSampler>(paths, o); }});
  reg.add(SourceFactory{
      .kind = SourceKind::kPmuSoft,
      .summary = "the PMU sampler on the software page-faults perf event",
      .make = [paths, o = opts.pmu_soft] { return std::make_unique<PmuSampler>(paths, o); }});
  reg.add(SourceFactory{
      .kind = SourceKind::kIdlePage,
      .summary = "idle page tracking: page_idle bitmap and /proc/PID/pagemap scans",
      .make = [paths, o = opts.idle] { return std::make_unique<IdlePageSource>(paths, o); }});
  reg.add(SourceFactory{
      .kind = SourceKind::kSoftDirty,
      .summary = "pages written since the last scan: soft-dirty bits of /proc/PID/pagemap",
      .make = [paths, o = opts.dirty] { return std::make_unique<SoftDirtySource>(paths, o); }});
}

std::vector<SourceReport> probe_sources(const SourceRegistry& reg) {
  std::vector<SourceReport> out;
  for (const auto& f : reg.all()) {
    auto src = f.make();
    out.push_back(SourceReport{.kind = f.kind, .summary = f.summary, .availability = src->probe()});
  }
  return out;
}

SourceOptions source_options(const policy::Config& cfg) {
  SourceOptions so;
  so.pmu.sample_period = cfg.sources.sample_period;
  so.pmu.max_samples_per_sec = cfg.sources.max_samples_per_sec;
  so.pmu_soft.sample_period = cfg.sources.sample_period;
  so.pmu_soft.max_samples_per_sec = cfg.sources.max_samples_per_sec;
  const auto damon = policy::damon_intervals(cfg);
  so.damon.sample_us = damon.sample / 1000;
  so.damon.aggr_us = damon.aggr / 1000;
  so.damon.min_regions = cfg.sources.damon_min_regions;
  so.damon.max_regions = cfg.sources.damon_max_regions;
  so.idle.scan_interval = cfg.sources.idle_scan_interval;
  so.dirty.scan_interval = cfg.sources.dirty_scan_interval;
  return so;
}

namespace {

Result<SourceChoice> forced(const SourceRegistry& reg, SourceKind force) {
  const std::string_view name = policy::source_name(force);
  const SourceFactory* f = reg.find(force);
  if (f == nullptr) {
    return fail(fmt::format("hotness source '{}' (forced by config) is not registered", name));
  }
  SourceChoice choice;
  auto src = f->make();
  const Availability a = src->probe();
  choice.reports.push_back(SourceReport{.kind = f->kind, .summary = f->summary, .availability = a});
  if (!a.ok) {
    return fail(
        fmt::format("hotness source '{}' (forced by config) cannot run here: {}", name, a.why),
        a.missing_capability ? EPERM : 0);
  }
  choice.summary = fmt::format("{} (forced by config)", name);
  choice.sources.push_back({.source = std::move(src), .reason = std::string(a.why)});
  return choice;
}

// Sources refused for one reason (no CAP_BPF, typically) share one clause:
// "; not pmu, damon, faults: no CAP_BPF; not idle: ...".
class Refusals {
 public:
  void add(std::string_view name, const std::string& why) {
    auto same = std::ranges::find(refused_, why, &std::pair<std::string, std::string>::second);
    if (same != refused_.end()) {
      same->first += fmt::format(", {}", name);
    } else {
      refused_.emplace_back(std::string(name), why);
    }
  }
  [[nodiscard]] std::string clauses() const {
    std::string out;
    for (const auto& [names, why] : refused_) out += fmt::format("; not {}: {}", names, why);
    return out;
  }

 private:
  std::vector<std::pair<std::string, std::string>> refused_;  // names, why
};

}  // namespace

Result<SourceChoice> select_sources(const SourceRegistry& reg, std::span<const SourceKind> use,
                                    std::optional<SourceKind> force) {
  if (force) return forced(reg, *force);
  const std::vector<SourceKind> defaults = policy::SourcesConfig{}.use;
  const std::span<const SourceKind> order = use.empty() ? std::span(defaults) : use;
  SourceChoice choice;
  Refusals refused;
  bool capability = false;
  std::string running;
  for (const SourceKind kind : order) {
    const std::string_view name = policy::source_name(kind);
    const SourceFactory* f = reg.find(kind);
    if (f == nullptr) {
      return fail(fmt::format("hotness source '{}' in sources.use is not registered", name));
    }
    auto src = f->make();
    const Availability a = src->probe();
    choice.reports.push_back(
        SourceReport{.kind = f->kind, .summary = f->summary, .availability = a});
    if (!a.ok) {
      refused.add(name, a.why);
      capability |= a.missing_capability;
      continue;
    }
    running += fmt::format("{}{}", running.empty() ? "" : ", ", name);
    choice.sources.push_back({.source = std::move(src), .reason = std::string(a.why)});
  }
  if (choice.sources.empty()) {
    return fail(fmt::format("no hotness source can run here{}", refused.clauses()),
                capability ? EPERM : 0);
  }
  choice.summary = running + refused.clauses();
  return choice;
}

DramReadEvidence dram_read_evidence(std::span<const SourceKind> running, bool hint_faults_in_dram) {
  const auto runs = [&](SourceKind k) { return std::ranges::find(running, k) != running.end(); };
  if (runs(SourceKind::kPmu)) return DramReadEvidence::kPmu;
  if (hint_faults_in_dram && (runs(SourceKind::kFault) || runs(SourceKind::kPmuSoft))) {
    return DramReadEvidence::kHintFaults;
  }
  return DramReadEvidence::kNone;
}

std::string damon_standby_reason(std::span<const SourceKind> running, bool hint_faults_in_dram) {
  switch (dram_read_evidence(running, hint_faults_in_dram)) {
    case DramReadEvidence::kPmu:
      return "PMU samples see reads on every node";
    case DramReadEvidence::kHintFaults:
      return "NUMA hint faults see reads on every node (kernel.numa_balancing bit 1)";
    case DramReadEvidence::kNone:
      break;
  }
  return {};
}

std::string dirty_standby_reason(std::span<const SourceKind> running, bool hint_faults) {
  const auto runs = [&](SourceKind k) { return std::ranges::find(running, k) != running.end(); };
  if (hint_faults && runs(SourceKind::kFault)) {
    return "NUMA hint faults (the faults source) see writes on slow nodes";
  }
  if (runs(SourceKind::kPmu) || runs(SourceKind::kPmuSoft)) {
    return "PMU samples see accesses on slow nodes";
  }
  return {};
}

std::string standby_reason(SourceKind kind, std::span<const SourceKind> running,
                           BalancingSeen balancing) {
  switch (kind) {
    case SourceKind::kDamon:
      return damon_standby_reason(running, balancing.hint_faults_in_dram);
    case SourceKind::kSoftDirty:
      return balancing.dirty_beside_faults ? std::string()
                                           : dirty_standby_reason(running, balancing.hint_faults);
    default:
      return {};
  }
}

}  // namespace kvtier::agent
