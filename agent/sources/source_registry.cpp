#include "agent/sources/source_registry.hpp"

#include <algorithm>

#include <fmt/format.h>

namespace kvtier::agent {

const SourceFactory* SourceRegistry::find(std::string_view name) const {
  for (const auto& f : factories_) {
    if (f.name == name) return &f;
  }
  return nullptr;
}

void register_builtin_sources(SourceRegistry& reg, const HostPaths& paths,
                              const SourceOptions& opts) {
  reg.add(SourceFactory{
      .name = "pmu",
      .summary = "PMU samples with data addresses (Intel PEBS load latency, AMD IBS op) via BPF",
      .make = [paths, o = opts.pmu] { return std::make_unique<PmuSampler>(paths, o, "pmu"); }});
  reg.add(SourceFactory{
      .name = "damon",
      .summary = "DAMON vaddr region access counts via the damon_aggregated tracepoint",
      .make = [paths, o = opts.damon] { return std::make_unique<DamonSource>(paths, o); }});
  reg.add(SourceFactory{
      .name = "faults",
      .summary = "user page faults incl. NUMA hint faults via the page_fault_user tracepoint",
      .make = [paths, o = opts.faults] { return std::make_unique<FaultSampler>(paths, o); }});
  reg.add(SourceFactory{.name = "pmu-soft",
                        .summary = "the PMU sampler on the software page-faults perf event",
                        .make = [paths, o = opts.pmu_soft] {
                          return std::make_unique<PmuSampler>(paths, o, "pmu-soft");
                        }});
  reg.add(SourceFactory{
      .name = "idle",
      .summary = "idle page tracking: page_idle bitmap and /proc/PID/pagemap scans",
      .make = [paths, o = opts.idle] { return std::make_unique<IdlePageSource>(paths, o); }});
}

std::vector<std::string> default_source_order() {
  return {"pmu", "damon", "faults", "pmu-soft", "idle"};
}

std::vector<SourceReport> probe_sources(const SourceRegistry& reg) {
  std::vector<SourceReport> out;
  for (const auto& f : reg.all()) {
    auto src = f.make();
    out.push_back(SourceReport{.name = f.name, .summary = f.summary, .availability = src->probe()});
  }
  return out;
}

Result<SourceChoice> select_source(const SourceRegistry& reg, std::span<const std::string> prefer,
                                   std::string_view force) {
  SourceChoice choice;
  if (!force.empty()) {
    const SourceFactory* f = reg.find(force);
    if (f == nullptr) {
      std::string names;
      for (const auto& g : reg.all()) names += (names.empty() ? "" : ", ") + g.name;
      return fail(fmt::format("hotness source '{}' (forced by config) is unknown; known: {}", force,
                              names));
    }
    auto src = f->make();
    Availability a = src->probe();
    choice.reports.push_back(
        SourceReport{.name = f->name, .summary = f->summary, .availability = a});
    if (!a.ok) {
      return fail(
          fmt::format("hotness source '{}' (forced by config) cannot run here: {}", force, a.why));
    }
    choice.reason = fmt::format("{} (forced by config): {}", f->name, a.why);
    choice.source = std::move(src);
    return choice;
  }
  const std::vector<std::string> defaults = default_source_order();
  const std::span<const std::string> order = prefer.empty() ? std::span(defaults) : prefer;
  // Sources refused for one reason (no CAP_BPF, typically) share one clause.
  std::vector<std::pair<std::string, std::string>> refused;  // names, why
  auto skipped = [&] {
    std::string out;
    for (const auto& [names, why] : refused) out += fmt::format("; not {}: {}", names, why);
    return out;
  };
  for (const auto& name : order) {
    const SourceFactory* f = reg.find(name);
    if (f == nullptr)
      return fail(fmt::format("hotness source '{}' in the preference list is unknown", name));
    auto src = f->make();
    Availability a = src->probe();
    choice.reports.push_back(
        SourceReport{.name = f->name, .summary = f->summary, .availability = a});
    if (!a.ok) {
      auto same = std::ranges::find(refused, a.why, &std::pair<std::string, std::string>::second);
      if (same != refused.end()) {
        same->first += ", " + f->name;
      } else {
        refused.emplace_back(f->name, a.why);
      }
      continue;
    }
    choice.reason = fmt::format("{}: {}{}", f->name, a.why, skipped());
    choice.source = std::move(src);
    return choice;
  }
  return fail(fmt::format("no hotness source can run here{}", skipped()));
}

}  // namespace kvtier::agent
