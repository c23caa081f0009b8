#pragma once
// The hotness sources kvtier knows, registered explicitly, and the choice of
// one: the first available in a preference order (or the one the config
// forces), with one line per source saying why it was or was not taken.

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "agent/host/host_paths.hpp"
#include "agent/sources/damon_source.hpp"
#include "agent/sources/fault_sampler.hpp"
#include "agent/sources/hotness_source.hpp"
#include "agent/sources/idle_page_source.hpp"
#include "agent/sources/pmu_sampler.hpp"
#include "agent/sources/soft_dirty_source.hpp"
#include "policy/config.hpp"
#include "policy/types.hpp"

namespace kvtier::agent {

struct SourceFactory {
  SourceKind kind = SourceKind::kPmu;
  std::string summary;  // what it measures, for `kvtierctl sources`
  std::function<std::unique_ptr<HotnessSource>()> make;
};

class SourceRegistry {
 public:
  void add(SourceFactory f) { factories_.push_back(std::move(f)); }
  [[nodiscard]] const std::vector<SourceFactory>& all() const { return factories_; }
  [[nodiscard]] const SourceFactory* find(SourceKind kind) const;

 private:
  std::vector<SourceFactory> factories_;
};

struct SourceOptions {
  PmuOptions pmu;
  PmuOptions pmu_soft{.events = PmuEventChoice::kSoftware};
  FaultOptions faults;
  DamonOptions damon;
  IdlePageOptions idle;
  SoftDirtyOptions dirty;
};

// The config's [sources] keys as the sources take them: every key but `use`
// and `force` (which pick the sources) lands here. The faults source has no
// options: it records every fault (sample_period is pmu's).
SourceOptions source_options(const policy::Config& cfg);

// pmu (PEBS/IBS), damon, faults, pmu-soft (software page-faults), idle, dirty
// (soft-dirty bits).
void register_builtin_sources(SourceRegistry& reg, const HostPaths& paths,
                              const SourceOptions& opts);

struct SourceReport {
  SourceKind kind = SourceKind::kPmu;
  std::string summary;
  Availability availability;
};

// Probes every registered source.
std::vector<SourceReport> probe_sources(const SourceRegistry& reg);

struct ChosenSource {
  std::unique_ptr<HotnessSource> source;
  std::string reason;  // one line: what the probe found
};

struct SourceChoice {
  std::vector<ChosenSource> sources;  // every one of `use` the host supports, in that order
  std::string summary;                // one line: which run, and why the others cannot
  std::vector<SourceReport> reports;  // every source probed
};

// `force`: that source or an error saying why not. Else every available one in
// `use` (the config's default, policy::SourcesConfig, when empty); an error
// saying why each cannot run when none can; its code is EPERM when one was
// refused for a missing capability.
Result<SourceChoice> select_sources(const SourceRegistry& reg, std::span<const SourceKind> use,
                                    std::optional<SourceKind> force);

// Why DAMON need not run beside the sources `running`, or "" when it must. Where a
// page-level source sees reads on every node (PMU samples; NUMA hint faults when
// normal balancing, bit 1 of kernel.numa_balancing, unmaps DRAM pages too:
// `hint_faults_in_dram`), each page's age comes from its own evidence, and DAMON's
// regions only blur it: a region holds 64 KiB KV blocks of many sequences, and one
// block in use kept every idle block around it from going cold. Else the regions
// are the only read evidence in DRAM.
std::string damon_standby_reason(std::span<const SourceKind> running, bool hint_faults_in_dram);

// Why the soft-dirty source need not run beside the sources `running`, or "" when
// it must. Its scan write-protects every page of the target (clear_refs), so each
// page the workload writes takes a fault in the workload's own time (measured on
// the benchmark: about as many faults as the NUMA hint faults, a tenth of kvsim's
// CPU), and what it finds, a write to a page on the slow node, is what the NUMA
// hint faults (the faults source) and PMU samples see too.
// `hint_faults`: kernel.numa_balancing unmaps pages on slow nodes (bit 1 or 2), so
// the faults source sees NUMA hint faults at all.
std::string dirty_standby_reason(std::span<const SourceKind> running, bool hint_faults);

// Why a source of kind `kind` stands by beside `running` (the two functions above),
// or "" when it runs.
struct BalancingSeen {
  bool hint_faults = false;          // bit 1 or 2: pages on slow nodes fault
  bool hint_faults_in_dram = false;  // bit 1: DRAM pages fault too
  bool dirty_beside_faults = false;  // [sources] dirty_beside_faults: dirty never stands by
};
std::string standby_reason(SourceKind kind, std::span<const SourceKind> running,
                           BalancingSeen balancing);

// Which of the sources `running` sees reads of DRAM pages page by page: PMU samples,
// the NUMA hint faults (with `hint_faults_in_dram`, as above), or none (DAMON's
// regions then must). damon_standby_reason() words the first two.
enum class DramReadEvidence : std::uint8_t { kNone, kPmu, kHintFaults };
DramReadEvidence dram_read_evidence(std::span<const SourceKind> running, bool hint_faults_in_dram);

}  // namespace kvtier::agent
