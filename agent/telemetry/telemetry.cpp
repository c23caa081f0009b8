#include "agent/telemetry/telemetry.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "policy/topology.hpp"
#include "policy/types.hpp"

namespace kvtier::agent {

using nlohmann::json;

std::string_view metric_kind_name(MetricKind kind) {
  switch (kind) {
    case MetricKind::kCounter:
      return "counter";
    case MetricKind::kGauge:
      return "gauge";
    case MetricKind::kHistogram:
      return "histogram";
  }
  return "untyped";
}

namespace {

// The placement feedback's metrics: what came back and how promotion by co-access
// group fared (out of the constructor for its length).
void describe_feedback(Telemetry& t) {
  t.describe("kvtier_misdemoted_bytes_total", MetricKind::kCounter,
             "Demoted bytes accessed again within cold_age of their demotion, per group");
  t.describe("kvtier_reactivated_bytes_total", MetricKind::kCounter,
             "Demoted bytes accessed again later than cold_age after their demotion, per group");
  t.describe(
      "kvtier_slow_tier_touches_total", MetricKind::kCounter,
      "Page-level samples (NUMA hint faults, PMU samples) of pages on a slow node, per group");
  t.describe(
      "kvtier_group_promotion_bytes_total", MetricKind::kCounter,
      "Bytes promoted by co-access group (or at stake in a trial run without moving), judged "
      "hit (the group's witness page touched within the cold age) or wasted, per group");
  t.describe("kvtier_group_promotion_hit_rate", MetricKind::kGauge,
             "Share of the bytes judged lately that were hits (1 before any); below "
             "group_hit_rate_min promotion by group is off, per group");
  t.describe("kvtier_group_promotion_on", MetricKind::kGauge,
             "1 while promotion by co-access group runs, 0 once the hit rate switched it off or "
             "promote_groups = false, per group");
  t.describe("kvtier_coaccess_groups", MetricKind::kGauge,
             "Co-access groups known now, all targets of the group");
  t.describe("kvtier_misdemotion_ratio", MetricKind::kGauge,
             "Mis-demoted over demoted bytes in the feedback window, per group");
}

}  // namespace

Telemetry::Telemetry() {
  describe("kvtier_page_moves_total", MetricKind::kCounter,
           "Pages a mover was asked to move, by kernel outcome (status) and destination node");
  describe("kvtier_moved_bytes_total", MetricKind::kCounter,
           "Bytes moved to each node (pages now on the destination)");
  describe("kvtier_source_samples_total", MetricKind::kCounter,
           "Access samples received from each hotness source");
  describe("kvtier_source_regions_total", MetricKind::kCounter,
           "Region access reports received from each hotness source");
  describe("kvtier_plan_moves", MetricKind::kGauge, "Moves in the last plan");
  describe("kvtier_plan_bytes", MetricKind::kGauge,
           "Bytes the last plan demotes or promotes (direction)");
  describe("kvtier_promotion_replans_total", MetricKind::kCounter,
           "Promotion ticks that used up the last plan's spare DRAM pages while pages accessed "
           "on a slow node waited for room, and planned again at once");
  describe("kvtier_move_deferred_bytes_total", MetricKind::kCounter,
           "Bytes of planned moves left to the next step because the step's slice of move time "
           "ran out");
  describe("kvtier_loop_steps_total", MetricKind::kCounter,
           "Control-loop steps, by result (ok, error)");
  describe("kvtier_loop_duration_seconds", MetricKind::kHistogram,
           "Time one control-loop step took",
           {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5});
  describe("kvtier_pinned_bytes", MetricKind::kGauge,
           "Bytes of the targets known long-term pinned (not movable), per group and node");
  describe("kvtier_target_resident_bytes", MetricKind::kGauge,
           "Bytes of each target process resident on each node");
  describe("kvtier_node_memory_free_bytes", MetricKind::kGauge, "Free memory on each NUMA node");
  describe("kvtier_node_memory_total_bytes", MetricKind::kGauge, "Total memory on each NUMA node");
  describe("kvtier_node_memory_reserved_bytes", MetricKind::kGauge,
           "Free memory on each NUMA node below its zones' high watermarks and lowmem reserves "
           "(/proc/zoneinfo): the kernel's, not counted as room for moves");
  describe("kvtier_node_info", MetricKind::kGauge,
           "1 for each NUMA node: whether it has CPUs and whether kvtier would demote to it");
  describe("kvtier_demotion_targets", MetricKind::kGauge,
           "NUMA nodes kvtier demotes to now (read every step: 0 while every such node's memory "
           "is offline)");
  describe("kvtier_topology_changes_total", MetricKind::kCounter,
           "Changes of the NUMA topology seen between steps: a node's memory onlined or "
           "offlined, a node that became or stopped being a demotion target, came or went");
  describe("kvtier_source_refused", MetricKind::kGauge,
           "1 for each hotness source the kernel refused at start or at the last reload (DAMON "
           "busy, a lockdown mode, no BTF): kvtierd runs with the others");
  describe("kvtier_observe_only", MetricKind::kGauge,
           "1 while kvtierd moves no page (no demotion target when it started), else 0");
  describe("kvtier_demoted_bytes_total", MetricKind::kCounter, "Bytes kvtier demoted, per group");
  describe("kvtier_promoted_bytes_total", MetricKind::kCounter,
           "Bytes promoted back to DRAM after an access on the slow node, per group and by whom "
           "(kvtier; kernel: NUMA balancing in the fault path)");
  describe_feedback(*this);
  describe("kvtier_effective_cold_age_seconds", MetricKind::kGauge,
           "The cold age kvtier demotes at now: cold_age raised by mis-demotions, per group");
  describe("kvtier_promotion_latency_seconds", MetricKind::kHistogram,
           "Promotions, by who moved the page (kvtier, kernel): first page-level sample on the "
           "slow node to the page back in DRAM (kernel: to the residency read that found it "
           "there, an upper bound)",
           {0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60});
  describe("kvtier_hot_bytes", MetricKind::kGauge,
           "Target bytes accessed within their group's effective cold age, per node");
  describe("kvtier_loop_cpu_seconds_total", MetricKind::kCounter,
           "CPU time of the control loop's thread, kernel work in its syscalls included, by "
           "phase (discover, sources, residency, plan, move: moving pages)");
  describe("kvtier_return_watch_chunks_total", MetricKind::kCounter,
           "The faults source's return watch, in 64 KiB chunks, by event (armed, returned, "
           "failed)");
  describe("process_cpu_seconds_total", MetricKind::kCounter,
           "User and system CPU time kvtierd has used, all threads, in seconds");
  describe("process_resident_memory_bytes", MetricKind::kGauge,
           "kvtierd's resident memory in bytes (it lives in the DRAM it manages)");
}

void Telemetry::set_hot_bytes(const std::map<int, std::uint64_t>& bytes_by_node) {
  clear("kvtier_hot_bytes");
  for (const auto& [node, bytes] : bytes_by_node) {
    set("kvtier_hot_bytes", {{"node", fmt::format("{}", node)}}, static_cast<double>(bytes));
  }
}

Telemetry::Family& Telemetry::family(const std::string& name, MetricKind kind) {
  auto it = families_.find(name);
  if (it == families_.end()) {
    it = families_.emplace(name, Family{.meta = {.name = name, .kind = kind}}).first;
  }
  return it->second;
}

void Telemetry::describe(const std::string& name, MetricKind kind, std::string help,
                         std::vector<double> bounds) {
  std::scoped_lock lock(mu_);
  auto& f = family(name, kind);
  f.meta.help = std::move(help);
  std::sort(bounds.begin(), bounds.end());
  f.meta.bounds = std::move(bounds);
}

void Telemetry::add(const std::string& name, const MetricLabels& labels, double delta) {
  std::scoped_lock lock(mu_);
  auto& s = family(name, MetricKind::kCounter).series[labels];
  s.labels = labels;
  s.value += delta;
}

void Telemetry::set(const std::string& name, const MetricLabels& labels, double value) {
  std::scoped_lock lock(mu_);
  auto& s = family(name, MetricKind::kGauge).series[labels];
  s.labels = labels;
  s.value = value;
}

void Telemetry::observe(const std::string& name, const MetricLabels& labels, double value) {
  std::scoped_lock lock(mu_);
  auto& f = family(name, MetricKind::kHistogram);
  auto& s = f.series[labels];
  if (s.histogram.buckets.empty()) {
    s.labels = labels;
    s.histogram.bounds = f.meta.bounds;
    s.histogram.buckets.assign(f.meta.bounds.size() + 1, 0);
  }
  const auto& b = s.histogram.bounds;
  const auto idx =
      static_cast<std::size_t>(std::lower_bound(b.begin(), b.end(), value) - b.begin());
  ++s.histogram.buckets[idx];
  s.histogram.sum += value;
  ++s.histogram.count;
}

void Telemetry::clear(const std::string& name) {
  std::scoped_lock lock(mu_);
  if (auto it = families_.find(name); it != families_.end()) it->second.series.clear();
}

double Telemetry::value(const std::string& name, const MetricLabels& labels) const {
  std::scoped_lock lock(mu_);
  auto f = families_.find(name);
  if (f == families_.end()) return 0.0;
  auto s = f->second.series.find(labels);
  if (s == f->second.series.end()) return 0.0;
  return f->second.meta.kind == MetricKind::kHistogram
             ? static_cast<double>(s->second.histogram.count)
             : s->second.value;
}

std::vector<MetricFamilyData> Telemetry::snapshot() const {
  std::scoped_lock lock(mu_);
  std::vector<MetricFamilyData> out;
  out.reserve(families_.size());
  for (const auto& [name, f] : families_) {
    MetricFamilyData d = f.meta;
    for (const auto& [labels, s] : f.series) d.series.push_back(s);
    out.push_back(std::move(d));
  }
  return out;
}

json Telemetry::to_json() const {
  json out = json::object();
  for (const auto& f : snapshot()) {
    json series = json::array();
    for (const auto& s : f.series) {
      json entry{{"labels", s.labels}};
      if (f.kind == MetricKind::kHistogram) {
        json buckets = json::array();
        std::uint64_t cumulative = 0;
        for (std::size_t i = 0; i < s.histogram.buckets.size(); ++i) {
          cumulative += s.histogram.buckets[i];
          // JSON has no infinity: the last bucket's bound is written as "+Inf".
          json le = i < s.histogram.bounds.size() ? json(s.histogram.bounds[i]) : json("+Inf");
          buckets.push_back({{"le", le}, {"count", cumulative}});
        }
        entry["count"] = s.histogram.count;
        entry["sum"] = s.histogram.sum;
        entry["buckets"] = buckets;
      } else {
        entry["value"] = s.value;
      }
      series.push_back(std::move(entry));
    }
    out[f.name] = {{"type", metric_kind_name(f.kind)}, {"help", f.help}, {"series", series}};
  }
  return out;
}

void Telemetry::record_moves(const MoveStats& st, int to_node) {
  const std::string node = fmt::format("{}", to_node);
  const std::pair<const char*, std::uint64_t> outcomes[] = {{"moved", st.moved},
                                                            {"already_there", st.already_there},
                                                            {"busy", st.busy},
                                                            {"pinned", st.pinned},
                                                            {"not_present", st.not_present},
                                                            {"gone", st.gone},
                                                            {"no_memory", st.no_memory},
                                                            {"permission", st.permission},
                                                            {"other", st.other},
                                                            {"partial_huge", st.partial_huge}};
  for (const auto& [status, n] : outcomes) {
    if (n > 0)
      add("kvtier_page_moves_total", {{"status", status}, {"node", node}}, static_cast<double>(n));
  }
  if (st.bytes_moved > 0) {
    add("kvtier_moved_bytes_total", {{"node", node}}, static_cast<double>(st.bytes_moved));
  }
}

void Telemetry::record_source_batch(std::string_view source, std::uint64_t samples,
                                    std::uint64_t regions) {
  const MetricLabels labels{{"source", std::string(source)}};
  add("kvtier_source_samples_total", labels, static_cast<double>(samples));
  add("kvtier_source_regions_total", labels, static_cast<double>(regions));
}

void Telemetry::record_plan(const Plan& plan) {
  set("kvtier_plan_moves", {}, static_cast<double>(plan.moves.size()));
  set("kvtier_plan_bytes", {{"direction", "demote"}}, static_cast<double>(plan.demote_bytes));
  set("kvtier_plan_bytes", {{"direction", "promote"}}, static_cast<double>(plan.promote_bytes));
}

void Telemetry::record_step(std::chrono::nanoseconds duration, bool ok) {
  add("kvtier_loop_steps_total", {{"result", ok ? "ok" : "error"}});
  observe("kvtier_loop_duration_seconds", {}, std::chrono::duration<double>(duration).count());
}

void Telemetry::set_node_memory(const policy::Topology& topo) {
  for (const auto& n : topo.nodes) {
    const MetricLabels node{{"node", fmt::format("{}", n.id)}};
    set("kvtier_node_memory_free_bytes", node, static_cast<double>(n.mem_free_bytes));
    set("kvtier_node_memory_reserved_bytes", node, static_cast<double>(n.mem_reserved_bytes));
    set("kvtier_node_memory_total_bytes", node, static_cast<double>(n.mem_total_bytes));
  }
  // Read every step, so memory onlined after start (daxctl) shows while kvtierd observes only.
  clear("kvtier_node_info");
  int targets = 0;
  for (const auto& role : policy::classify_nodes(topo)) {
    if (role.demotion_target) ++targets;
    const auto* n = topo.find(role.node);
    const bool cpus = n != nullptr && n->has_cpus();
    set("kvtier_node_info",
        {{"node", fmt::format("{}", role.node)},
         {"has_cpus", cpus ? "true" : "false"},
         {"demotion_target", role.demotion_target ? "true" : "false"}},
        1);
  }
  set("kvtier_demotion_targets", {}, targets);
}

void Telemetry::set_residency(
    const std::map<Pid, std::map<int, std::uint64_t>>& bytes_by_pid_node) {
  std::scoped_lock lock(mu_);
  auto& f = family("kvtier_target_resident_bytes", MetricKind::kGauge);
  f.series.clear();
  for (const auto& [pid, nodes] : bytes_by_pid_node) {
    for (const auto& [node, bytes] : nodes) {
      MetricLabels labels{{"pid", fmt::format("{}", pid)}, {"node", fmt::format("{}", node)}};
      f.series[labels] = MetricSeries{.labels = labels, .value = static_cast<double>(bytes)};
    }
  }
}

}  // namespace kvtier::agent
