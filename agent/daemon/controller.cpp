#include "agent/daemon/controller.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <map>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "agent/daemon/daemon.hpp"
#include "agent/daemon/loop_state.hpp"
#include "agent/daemon/target_set.hpp"
#include "agent/daemon/telemetry.hpp"
#include "agent/daemon/views.hpp"
#include "agent/host/residency.hpp"
#include "agent/host/topology_reader.hpp"
#include "agent/sources/hotness_source.hpp"
#include "policy/budget.hpp"
#include "policy/config.hpp"
#include "policy/error.hpp"
#include "policy/heat.hpp"
#include "policy/planner.hpp"
#include "policy/topology.hpp"
#include "policy/types.hpp"

namespace kvtier::agent {
namespace {

// Whether `addr` lies in one of `vmas` (sorted, disjoint).
bool in_tracked(const std::vector<AddrRange>& vmas, std::uint64_t addr) {
  auto it = std::ranges::upper_bound(vmas, addr, {}, &AddrRange::start);
  return it != vmas.begin() && std::prev(it)->contains(addr);
}

}  // namespace

Controller::Controller(policy::CompiledConfig config, ControllerDeps deps, TimeNs now)
    : deps_(std::move(deps)),
      state_(std::move(config), TargetSet(deps_.paths, deps_.self)),
      bucket_(state_.config.config.limits.migrate_rate, state_.config.config.limits.migrate_burst,
              now) {
  for (const auto& s : deps_.sources) {
    state_.sources.push_back(SourceStatus{.kind = s.source->kind(), .reason = s.reason});
  }
  if (deps_.mover) state_.mover = deps_.mover->name();
  state_.observe_reason = deps_.observe_reason;
  state_.budget_bytes = bucket_.available();
}

Controller::~Controller() {
  shutdown();
}

void Controller::shutdown() {
  for (std::size_t i = 0; i < deps_.sources.size(); ++i) {
    if (!state_.sources[i].started) continue;
    deps_.sources[i].source->stop();
    state_.sources[i].started = false;
    spdlog::info("source {} stopped", deps_.sources[i].source->name());
  }
}

policy::HeatParams Controller::heat_params(std::size_t group) const {
  // Region granularity only when every source reports regions (DAMON): page
  // evidence next to regions keeps its pages.
  const bool regions =
      !deps_.sources.empty() && std::ranges::all_of(deps_.sources, [](const LoopSource& s) {
        return s.source->kind() == SourceKind::kDamon;
      });
  const auto& cfg = state_.config.config;
  return policy::HeatParams{
      .half_life = cfg.groups[group].policy.half_life,
      .granularity = regions ? policy::Granularity::kRegion : policy::Granularity::kPage,
      .region_interval = cfg.sources.damon_aggr_interval};
}

void Controller::apply_config(policy::CompiledConfig config) {
  state_.config = std::move(config);
  const auto& limits = state_.config.config.limits;
  bucket_ = policy::TokenBucket(limits.migrate_rate, limits.migrate_burst, 0);
  // Re-match now rather than at the next step: until then `status`, `targets`
  // and `explain` index the new config's groups with each target's group.
  targets_changed_ |=
      state_.targets.rematch(state_.config, [this](std::size_t g) { return heat_params(g); });
}

Result<void> Controller::step(const StepContext& ctx, Telemetry& telemetry) {
  ++state_.steps;
  if (auto ok = discover(ctx.now, telemetry); !ok) return ok;
  ingest(ctx.now, telemetry);
  read_residency(ctx.now, telemetry);
  plan(ctx.now, telemetry);
  if (may_move(ctx)) dispatch(ctx.now, telemetry);
  record(ctx.now);
  return {};
}

Result<void> Controller::discover(TimeNs now, Telemetry& telemetry) {
  auto topo = read_topology(deps_.paths);
  if (!topo) return std::unexpected(topo.error());
  state_.topology = std::move(*topo);
  telemetry.set_node_memory(state_.topology);
  const bool changed =
      state_.targets.discover(state_.config, [this](std::size_t g) { return heat_params(g); });
  if (auto ok = start_sources(changed || std::exchange(targets_changed_, false)); !ok) return ok;
  std::uint64_t host_bytes = 0;
  for (const auto& n : state_.topology.nodes) host_bytes += n.mem_total_bytes;
  state_.targets.track_vmas(now, host_bytes);
  return {};
}

// Starts the sources not running yet and tells every source that starts or
// whose targets changed the pids to watch. An error stops the step (the
// daemon logs it); the next step tries again.
Result<void> Controller::start_sources(bool targets_changed) {
  const std::vector<Pid> pids = state_.targets.pids();
  Result<void> result;
  for (std::size_t i = 0; i < deps_.sources.size(); ++i) {
    HotnessSource& src = *deps_.sources[i].source;
    SourceStatus& status = state_.sources[i];
    if (status.started && !targets_changed) continue;
    Result<void> ok;
    if (!status.started) {
      ok = src.start();
      if (ok) {
        status.started = true;
        status.error.clear();
        spdlog::info("source {} started: {}", src.name(), status.reason);
      }
    }
    if (ok) ok = src.set_targets(pids);
    if (ok) continue;
    status.error = ok.error().message;
    if (result) {
      result = fail(fmt::format("source {}: {}", src.name(), ok.error().message), ok.error().code);
    }
  }
  return result;
}

void Controller::ingest(TimeNs now, Telemetry& telemetry) {
  for (std::size_t i = 0; i < deps_.sources.size(); ++i) {
    if (!state_.sources[i].started) continue;
    HotnessSource& src = *deps_.sources[i].source;
    SourceBatch batch;
    if (auto ok = src.collect(now, batch); !ok) {
      state_.sources[i].error = ok.error().message;
      spdlog::warn("source {}: {}", src.name(), ok.error().message);
    }
    add_to_heat(batch);
    telemetry.record_source_batch(src.name(), batch.samples.size(), batch.regions.size());
  }
}

// Only what falls in tracked mappings counts: DAMON's regions span the gaps
// between mappings and samples land on stacks and files, and heat there would
// be tracked (and shown) but could never be moved.
void Controller::add_to_heat(const SourceBatch& batch) {
  std::uint64_t used = 0;
  for (const auto& s : batch.samples) {
    Target* t = state_.targets.find(s.pid);
    if (t == nullptr || !in_tracked(t->vmas, s.addr)) continue;
    t->heat->add(s);
    ++used;
  }
  for (const auto& r : batch.regions) {
    Target* t = state_.targets.find(r.pid);
    if (t == nullptr) continue;
    bool any = false;
    for (const auto& v : t->vmas) {
      if (v.end <= r.range.start) continue;
      if (v.start >= r.range.end) break;
      RegionAccess part = r;
      part.range = {std::max(v.start, r.range.start), std::min(v.end, r.range.end)};
      t->heat->add(part);
      any = true;
    }
    if (any) ++used;
  }
  spdlog::debug("step {}: {} samples, {} regions, {} for targets", state_.steps,
                batch.samples.size(), batch.regions.size(), used);
}

// Where every tracked page is (the heat table's nodes), which 2 MiB blocks are
// huge pages (planned whole from now on), and bytes per node for telemetry.
void Controller::read_residency(TimeNs now, Telemetry& telemetry) {
  std::map<Pid, std::map<int, std::uint64_t>> residency;
  for (auto& [pid, t] : state_.targets.all()) {
    std::string error;
    PageMap map = deps_.residency.map(pid, t.vmas, &error);
    // Gone or not allowed: what was read counts; discover() drops it next step.
    if (!error.empty()) spdlog::debug("residency of {}: {}", pid, error);
    for (const auto& run : map.runs) t.heat->set_node(run.range, run.node);
    t.heat->set_huge_blocks(map.huge_blocks);
    if (t.heat->granularity() == policy::Granularity::kRegion) t.heat->compact(now);
    t.bytes_per_node = std::move(map.bytes_per_node);
    t.not_present_bytes = map.not_present_bytes;
    t.huge_blocks = std::move(map.huge_blocks);
    residency[pid] = t.bytes_per_node;
  }
  telemetry.set_residency(residency);
}

void Controller::plan(TimeNs now, Telemetry& telemetry) {
  bucket_.refill(now);
  state_.budget_bytes = bucket_.available();
  policy::Snapshot snap{.topology = &state_.topology,
                        .groups = state_.config.config.groups,
                        .limits = state_.config.config.limits,
                        .now = now,
                        .budget_bytes = state_.budget_bytes};
  for (auto& [pid, t] : state_.targets.all()) {
    snap.targets.push_back(policy::TargetView{.pid = pid, .group = t.group, .heat = t.heat.get()});
    t.last_moves.clear();
  }
  state_.last_plan = policy::plan(snap);
  telemetry.record_plan(state_.last_plan);
  for (const auto& m : state_.last_plan.moves) {
    if (Target* t = state_.targets.find(m.pid)) t->last_moves.push_back(m);
  }
}

// Without a hotness source every page looks idle: never demote blindly.
bool Controller::may_move(const StepContext& ctx) const {
  const bool sources_run =
      !state_.sources.empty() &&
      std::ranges::all_of(state_.sources, [](const SourceStatus& s) { return s.started; });
  return deps_.mover && sources_run && !ctx.paused;
}

// Consecutive moves of one target to one node go to the mover together.
void Controller::dispatch(TimeNs now, Telemetry& telemetry) {
  const auto& moves = state_.last_plan.moves;
  std::vector<AddrRange> ranges;
  for (std::size_t i = 0; i < moves.size();) {
    std::size_t j = i;
    ranges.clear();
    while (j < moves.size() && moves[j].pid == moves[i].pid &&
           moves[j].to_node == moves[i].to_node) {
      ranges.push_back(moves[j++].range);
    }
    move(moves[i].pid, ranges, moves[i].to_node, now, telemetry);
    i = j;
  }
  state_.budget_bytes = bucket_.available();
}

void Controller::move(Pid pid, std::span<const AddrRange> ranges, int to_node, TimeNs now,
                      Telemetry& telemetry) {
  Target* t = state_.targets.find(pid);
  const std::span<const std::uint64_t> huge = t != nullptr
                                                  ? std::span<const std::uint64_t>(t->huge_blocks)
                                                  : std::span<const std::uint64_t>();
  // The residency phase has just located these pages: the mover need not look again.
  const MoveStats st = deps_.mover->move_located(pid, ranges, to_node, huge);
  telemetry.record_moves(st, to_node);
  state_.moved_total += st;
  bucket_.consume(std::min(st.bytes_moved, bucket_.available()));
  if (t != nullptr) {
    t->moved += st;
    for (const auto& r : ranges) t->heat->mark_moved(r, to_node, now);
  }
  if (st.gone == 0 && st.moved + st.already_there == 0 && st.requested > 0) {
    spdlog::warn(
        "moving {} pages of {} to node {}: none moved (busy {}, pinned {}, no memory {}, "
        "permission {}, partial huge pages {}, errno {})",
        st.requested, pid, to_node, st.busy, st.pinned, st.no_memory, st.permission,
        st.partial_huge, st.last_errno);
  }
}

void Controller::record(TimeNs now) {
  for (auto& [pid, t] : state_.targets.all()) {
    t.history.push_back(bin_heat(t, kHistoryBins, now));
    while (t.history.size() > kHistorySteps) t.history.pop_front();
  }
}

}  // namespace kvtier::agent
