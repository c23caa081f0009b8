#pragma once
// What the daemon counts and measures, in one registry that both the control
// socket (JSON, for `kvtierctl status` and `dump`) and the Prometheus endpoint
// read. Thread-safe: the Prometheus exporter scrapes from its own threads.

#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "policy/topology.hpp"
#include "policy/types.hpp"

namespace kvtier::agent {

// Sorted, so a series has one identity whatever order the labels came in.
using MetricLabels = std::map<std::string, std::string>;

enum class MetricKind : std::uint8_t { kCounter, kGauge, kHistogram };

struct HistogramData {
  std::vector<double> bounds;          // upper bounds, ascending; +Inf is implied
  std::vector<std::uint64_t> buckets;  // per bucket (not cumulative), bounds.size() + 1
  double sum = 0.0;
  std::uint64_t count = 0;
};

struct MetricSeries {
  MetricLabels labels;
  double value = 0.0;  // counter and gauge
  HistogramData histogram;
};

struct MetricFamilyData {
  std::string name;
  std::string help;
  MetricKind kind = MetricKind::kCounter;
  std::vector<double> bounds;  // histograms only
  std::vector<MetricSeries> series;
};

class Telemetry {
 public:
  // Declares kvtier's own metric families (see telemetry.cpp for the list).
  Telemetry();

  // Declares a family; declaring it again with the same kind is harmless.
  void describe(const std::string& name, MetricKind kind, std::string help,
                std::vector<double> bounds = {});
  // A name nobody described is created on first use, with no help text.
  void add(const std::string& name, const MetricLabels& labels, double delta = 1.0);
  void set(const std::string& name, const MetricLabels& labels, double value);
  void observe(const std::string& name, const MetricLabels& labels, double value);
  // Drops every series of a family (gauges recomputed from scratch each step,
  // such as residency of targets that may have exited).
  void clear(const std::string& name);

  // 0 for a series that does not exist; a histogram's count.
  [[nodiscard]] double value(const std::string& name, const MetricLabels& labels = {}) const;
  [[nodiscard]] std::vector<MetricFamilyData> snapshot() const;
  [[nodiscard]] nlohmann::json to_json() const;

  // kvtier's vocabulary on top of the generic calls.
  void record_moves(const MoveStats& stats, int to_node);
  void record_source_batch(std::string_view source, std::uint64_t samples, std::uint64_t regions);
  void record_plan(const Plan& plan);
  void record_step(std::chrono::nanoseconds duration, bool ok);
  // Free and total memory of each NUMA node.
  void set_node_memory(const policy::Topology& topo);
  // Replaces the hot-bytes gauges: bytes accessed within the cold age, per node.
  void set_hot_bytes(const std::map<int, std::uint64_t>& bytes_by_node);
  // Replaces the residency gauges: bytes of each target resident on each node.
  void set_residency(const std::map<Pid, std::map<int, std::uint64_t>>& bytes_by_pid_node);

 private:
  struct Family {
    MetricFamilyData meta;
    std::map<MetricLabels, MetricSeries> series;
  };
  Family& family(const std::string& name, MetricKind kind);

  mutable std::mutex mu_;
  std::map<std::string, Family> families_;
};

std::string_view metric_kind_name(MetricKind kind);

}  // namespace kvtier::agent
