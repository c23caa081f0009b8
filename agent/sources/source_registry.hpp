#pragma once
// The hotness sources kvtier knows, registered explicitly, and the choice of
// one: the first available in a preference order (or the one the config
// forces), with one line per source saying why it was or was not taken.

#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "agent/host/host_paths.hpp"
#include "agent/sources/damon_source.hpp"
#include "agent/sources/fault_sampler.hpp"
#include "agent/sources/hotness_source.hpp"
#include "agent/sources/idle_page_source.hpp"
#include "agent/sources/pmu_sampler.hpp"

namespace kvtier::agent {

struct SourceFactory {
  std::string name;
  std::string summary;  // what it measures, for `kvtierctl sources`
  std::function<std::unique_ptr<HotnessSource>()> make;
};

class SourceRegistry {
 public:
  void add(SourceFactory f) { factories_.push_back(std::move(f)); }
  [[nodiscard]] const std::vector<SourceFactory>& all() const { return factories_; }
  [[nodiscard]] const SourceFactory* find(std::string_view name) const;

 private:
  std::vector<SourceFactory> factories_;
};

struct SourceOptions {
  PmuOptions pmu;
  PmuOptions pmu_soft{.events = PmuEventChoice::kSoftware};
  FaultOptions faults;
  DamonOptions damon;
  IdlePageOptions idle;
};

// pmu (PEBS/IBS), damon, faults, pmu-soft (software page-faults), idle.
void register_builtin_sources(SourceRegistry& reg, const HostPaths& paths,
                              const SourceOptions& opts);

// Best first: per-access hardware samples, then DAMON (sees cold regions
// too), then faults (hint faults with NUMA balancing), then the software
// page-faults event (same information as faults at a higher cost), then
// idle-page scans (a page-table walk per scan).
std::vector<std::string> default_source_order();

struct SourceReport {
  std::string name;
  std::string summary;
  Availability availability;
};

// Probes every registered source.
std::vector<SourceReport> probe_sources(const SourceRegistry& reg);

struct SourceChoice {
  std::unique_ptr<HotnessSource> source;
  std::string reason;                 // one line: which and why, and why not the better ones
  std::vector<SourceReport> reports;  // every source probed on the way
};

// `force` non-empty: that source or an error saying why not. Else the first
// available one in `prefer` (default_source_order() when empty).
Result<SourceChoice> select_source(const SourceRegistry& reg, std::span<const std::string> prefer,
                                   std::string_view force);

}  // namespace kvtier::agent
