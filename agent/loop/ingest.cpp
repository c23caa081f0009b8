#include "agent/loop/ingest.hpp"

#include <bits/ranges_algo.h>
#include <fmt/core.h>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <numeric>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "agent/host/availability.hpp"
#include "agent/loop/feedback.hpp"
#include "agent/loop/loop_state.hpp"
#include "agent/loop/recorder.hpp"
#include "agent/loop/recording.hpp"
#include "agent/loop/target_set.hpp"
#include "agent/loop/views.hpp"
#include "agent/sources/hotness_source.hpp"
#include "agent/sources/return_watch.hpp"
#include "agent/sources/source_registry.hpp"
#include "agent/telemetry/telemetry.hpp"
#include "policy/config.hpp"
#include "policy/error.hpp"
#include "policy/heat.hpp"
#include "policy/rules.hpp"
#include "policy/types.hpp"
#include "policy/units.hpp"

namespace kvtier::agent {
namespace {

// A DAMON region found accessed in at least half of its checks counts as
// touched page by page (HeatParams::region_touch_share): it promotes from a
// slow node and checks demotions, beside the page-level sources. A weaker
// report only keeps its pages from going cold.
constexpr double kRegionTouchShare = 0.5;

// What the sources watch of a target: its tracked mappings and its borrowed
// mappings of shared pools (their evidence goes to the pool's owner), sorted.
std::vector<AddrRange> watched_ranges(const Target& t) {
  if (t.borrowed.empty()) return t.vmas;
  std::vector<AddrRange> out = t.vmas;
  out.insert(out.end(), t.borrowed.begin(), t.borrowed.end());
  std::ranges::sort(out, {}, &AddrRange::start);
  return out;
}

// Whether `addr` lies in one of `vmas` (sorted, disjoint).
bool in_tracked(const std::vector<AddrRange>& vmas, std::uint64_t addr) {
  auto it = std::ranges::upper_bound(vmas, addr, {}, &AddrRange::start);
  return it != vmas.begin() && std::prev(it)->contains(addr);
}

std::vector<SourceStatus> statuses(const std::vector<LoopSource>& sources) {
  std::vector<SourceStatus> out;
  out.reserve(sources.size());
  for (const auto& s : sources) {
    out.push_back(SourceStatus{.kind = s.source->kind(), .reason = s.reason});
  }
  return out;
}

}  // namespace

Ingest::Ingest(std::vector<LoopSource> sources, LoopState& state, Recorder& recorder)
    : sources_(std::move(sources)), s_(state), recorder_(recorder) {
  s_.sources = statuses(sources_);
}

void Ingest::replace(std::vector<LoopSource> sources) {
  stop();
  sources_ = std::move(sources);
  s_.sources = statuses(sources_);
}

void Ingest::stop() {
  for (std::size_t i = 0; i < sources_.size(); ++i) {
    if (!s_.sources[i].started) continue;
    sources_[i].source->stop();
    s_.sources[i].started = false;
    spdlog::info("source {} stopped", sources_[i].source->name());
  }
}

policy::HeatParams Ingest::heat_params(std::size_t group) const {
  // Region granularity only when every source reports regions (DAMON): page
  // evidence next to regions keeps its pages.
  const bool regions = !sources_.empty() && std::ranges::all_of(sources_, [](const LoopSource& s) {
    return s.source->kind() == SourceKind::kDamon;
  });
  const auto& cfg = s_.config.config;
  const auto& pol = cfg.groups[group].policy;
  return policy::HeatParams{
      .half_life = pol.half_life,
      .granularity = regions ? policy::Granularity::kRegion : policy::Granularity::kPage,
      .region_interval = policy::damon_intervals(cfg).aggr,
      .misdemotion_window = pol.cold_age.value_or(0),
      .region_touch_share = kRegionTouchShare};
}

ReturnWatch* Ingest::return_watch() const {
  for (std::size_t i = 0; i < sources_.size() && i < s_.sources.size(); ++i) {
    if (!s_.sources[i].started) continue;
    if (ReturnWatch* w = sources_[i].source->return_watch()) return w;
  }
  return nullptr;
}

ReturnWatch* Ingest::active_watch() const {
  return s_.fault_path_promotions ? nullptr : return_watch();
}

Result<void> Ingest::tell_ranges() {
  std::vector<TargetRanges> ranges;
  for (const auto& [pid, t] : s_.targets.all()) {
    ranges.push_back(TargetRanges{.pid = pid, .ranges = watched_ranges(t)});
  }
  for (std::size_t i = 0; i < sources_.size(); ++i) {
    if (!s_.sources[i].started) continue;
    HotnessSource& src = *sources_[i].source;
    if (auto ok = src.set_ranges(ranges); !ok) {
      s_.sources[i].error = ok.error().message;
      return fail(fmt::format("source {}: {}", src.name(), ok.error().message), ok.error().code);
    }
  }
  return {};
}

// The targets the hint faults do not cover (Target::scan_blind), sorted.
std::vector<Pid> Ingest::scan_blind_pids() const {
  std::vector<Pid> out;
  for (const auto& [pid, t] : s_.targets.all()) {
    if (t.scan_blind) out.push_back(pid);
  }
  return out;
}

// Why a source of `kind` is not needed now (standby_reason), or "" when it is:
// the started sources, and the kernel's knob as read at the last [tiering]
// apply; without a tiering handle (replay), the config's.
std::string Ingest::not_needed(SourceKind kind) const {
  return standby_reason(kind, s_.running_sources(),
                        {.hint_faults = s_.any_balancing(),
                         .hint_faults_in_dram = s_.normal_balancing(),
                         .dirty_beside_faults = s_.config.config.sources.dirty_beside_faults});
}

Result<void> Ingest::start(bool targets_changed) {
  const std::vector<Pid> all_pids = s_.targets.pids();
  const std::vector<Pid> blind = scan_blind_pids();
  Result<void> result;
  std::vector<std::size_t> order(sources_.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::ranges::stable_partition(order, [this](std::size_t i) {
    const SourceKind k = s_.sources[i].kind;
    return k != SourceKind::kDamon && k != SourceKind::kSoftDirty;
  });
  for (const std::size_t i : order) {
    auto ok = start_one(i, targets_changed, all_pids, blind);
    if (!ok && result) result = ok;
  }
  return result;
}

// One source of start(): stands by, starts, or is told its pids.
Result<void> Ingest::start_one(std::size_t i, bool targets_changed, const std::vector<Pid>& all,
                               const std::vector<Pid>& blind) {
  HotnessSource& src = *sources_[i].source;
  SourceStatus& status = s_.sources[i];
  std::string why = not_needed(status.kind);
  // Where it would stand by, it still watches what the hint faults miss.
  const std::vector<Pid>& pids = why.empty() ? all : blind;
  if (!why.empty() && blind.empty()) {
    if (status.standby.empty()) {
      src.stop();  // also when it never started: what it holds is dropped
      spdlog::info("source {} stands by: {}", src.name(), why);
    }
    status.started = false;
    status.standby = std::move(why);
    return {};
  }
  status.standby.clear();
  if (status.started && !targets_changed && pids == status.pids) return {};
  Result<void> ok;
  if (!status.started) {
    ok = src.start();
    if (ok) {
      status.started = true;
      status.error.clear();
      // What a source sees can change between its choice and its start: the
      // first step sets [tiering]'s kernel.numa_balancing, and only then do
      // faults include NUMA hint faults. Status says what holds now.
      if (const Availability now_seen = src.probe(); now_seen.ok) status.reason = now_seen.why;
      spdlog::info("source {} started: {}", src.name(), status.reason);
    }
  }
  if (ok) ok = src.set_targets(pids);
  if (ok) {
    status.pids = pids;
    return {};
  }
  status.error = ok.error().message;
  return fail(fmt::format("source {}: {}", src.name(), ok.error().message), ok.error().code);
}

void Ingest::collect(TimeNs now, Telemetry& telemetry) {
  for (std::size_t i = 0; i < sources_.size(); ++i) {
    if (!s_.sources[i].started) continue;
    HotnessSource& src = *sources_[i].source;
    SourceBatch batch;
    if (auto ok = src.collect(now, batch); !ok) {
      s_.sources[i].error = ok.error().message;
      spdlog::warn("source {}: {}", src.name(), ok.error().message);
    }
    // What the sharers of a pool saw is its owner's evidence (shared_pools.hpp).
    s_.targets.pools().to_owners(batch.samples, batch.regions);
    recorder_.rec(
        now, [&] { return RecBatch{.source = static_cast<std::uint32_t>(i), .batch = batch}; });
    add_to_heat(batch);
    telemetry.record_source_batch(src.name(), batch.samples.size(), batch.regions.size());
  }
}

// Only what falls in tracked mappings counts: DAMON's regions span the gaps
// between mappings and samples land on stacks and files, and heat there would
// be tracked (and shown) but could never be moved. A page-level sample of a page
// on a slow node is the evidence that promotes it: its first one starts the
// promotion latency's clock.
void Ingest::add_to_heat(const SourceBatch& batch) {
  std::uint64_t used = 0;
  const policy::NodeFacts facts(s_.topology);
  for (const auto& smp : batch.samples) {
    Target* t = s_.targets.find(smp.pid);
    if (t == nullptr || !in_tracked(t->vmas, smp.addr)) continue;
    if (auto u = t->heat->at(smp.addr, smp.time); u && slow_for(s_, facts, t->group, u->node)) {
      ++s_.feedback[t->group].slow_touches;
      const TimeNs first = smp.first_time != 0 ? smp.first_time : smp.time;
      auto [it, fresh] = t->first_slow_touch.try_emplace(u->range.start, first);
      if (!fresh) it->second = std::min(it->second, first);
      if (groups_ != nullptr && s_.config.config.groups[t->group].policy.promote_groups) {
        groups_->touch(smp.pid, smp.addr, smp.time, s_.feedback[t->group].tuner.effective());
      }
    }
    t->heat->add(smp);
    t->touched_pages.push_back(smp.addr & ~(kPageSize - 1));
    ++used;
  }
  for (const auto& r : batch.regions) {
    Target* t = s_.targets.find(r.pid);
    if (t == nullptr) continue;
    // The first mapping that ends past the region's start (t->vmas is sorted, disjoint).
    const auto from = std::ranges::upper_bound(t->vmas, r.range.start, {}, &AddrRange::end);
    if (from == t->vmas.end() || from->start >= r.range.end) continue;
    ++used;
    // Page granularity: a region found idle changes no page that is tracked (it
    // only dates untracked ones), and every page of t->vmas is tracked
    // (TargetSet::track_vmas), so its walk over the pages, 2 MiB at a time, is
    // skipped: DAMON's idle regions span most of a large pool at every aggregation.
    if (r.nr_accesses == 0 && t->heat->granularity() == policy::Granularity::kPage) continue;
    for (const auto& v : std::ranges::subrange(from, t->vmas.end())) {
      if (v.start >= r.range.end) break;
      RegionAccess part = r;
      part.range = {std::max(v.start, r.range.start), std::min(v.end, r.range.end)};
      t->heat->add(part);
    }
  }
  spdlog::debug("step {}: {} samples, {} regions, {} for targets", s_.steps, batch.samples.size(),
                batch.regions.size(), used);
}

namespace {

// The target's CPU rate (CPU seconds per second, all threads) over about the
// last `window`: from its oldest sample within it, or its oldest of all while
// it has none that old. nullopt: fewer than two samples a second apart.
std::optional<double> cpu_rate(const Target& t, TimeNs now, TimeNs window) {
  const auto& s = t.cpu_samples;
  if (s.size() < 2) return std::nullopt;
  auto from = std::ranges::find_if(s, [&](const auto& p) { return now - p.first <= window; });
  if (from != s.begin()) --from;  // the last one at least `window` old
  if (std::next(from) == s.end()) --from;
  const TimeNs wall = s.back().first - from->first;
  if (wall < policy::kNsPerSec) return std::nullopt;
  return static_cast<double>(s.back().second - from->second) / static_cast<double>(wall);
}

}  // namespace

void update_scan_coverage(LoopState& s, TimeNs now) {
  const bool faults =
      s.any_balancing() && std::ranges::any_of(s.sources, [](const SourceStatus& src) {
        return src.started && src.kind == SourceKind::kFault;
      });
  // The configured period, not the one max_hint_faults_per_sec paced longer:
  // a target scanned less because its hint faults are too many is not blind
  // to them, and the dirty scan's write faults would undo the pacing. With
  // "keep", the kernel's minimum now (its default where it does not show it).
  constexpr std::uint64_t kKernelDefaultPeriodMs = 1000;
  const auto period = static_cast<double>(s.config.config.tiering.scan_period_min.value_or(
      static_cast<TimeNs>(s.tiering.scan_period_min_ms.value_or(kKernelDefaultPeriodMs)) *
      1'000'000));
  const std::vector<TimeNs> cold_ages = s.cold_ages();
  for (auto& [pid, t] : s.targets.all()) {
    const TimeNs cold_age = t.group < cold_ages.size() ? cold_ages[t.group] : 0;
    const auto rate = cold_age > 0 ? cpu_rate(t, now, cold_age) : std::nullopt;
    if (!rate) continue;  // not known yet: as it was
    const double interval = *rate > 0 ? period / *rate : 1e18;
    t.scan_interval = static_cast<TimeNs>(std::min(interval, 1e18));
    const bool blind = faults && (t.scan_blind ? interval > static_cast<double>(cold_age) / 2
                                               : interval > static_cast<double>(cold_age));
    if (blind != t.scan_blind) {
      spdlog::info(
          "target {} ({}): {:.1f}% of a CPU, so the kernel's NUMA scan goes through it {} "
          "against a cold age of {:.0f} s{}",
          pid, t.comm, 100 * *rate, scan_interval_words(t.scan_interval),
          static_cast<double>(cold_age) / 1e9,
          blind ? ": hint faults miss its reads, DAMON and the dirty scan watch it"
                : ": hint faults see its reads again");
    }
    t.scan_blind = blind;
  }
}

}  // namespace kvtier::agent
