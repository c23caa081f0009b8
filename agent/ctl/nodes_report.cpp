#include "agent/ctl/nodes_report.hpp"

#include <fmt/format.h>
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "policy/topology.hpp"

namespace kvtier::agent {
namespace {

std::string cpu_ranges(const std::vector<int>& cpus) {
  if (cpus.empty()) return "-";
  std::string out;
  std::size_t i = 0;
  while (i < cpus.size()) {
    std::size_t j = i;
    while (j + 1 < cpus.size() && cpus[j + 1] == cpus[j] + 1) ++j;
    if (!out.empty()) out += ',';
    out += j == i ? fmt::format("{}", cpus[i]) : fmt::format("{}-{}", cpus[i], cpus[j]);
    i = j + 1;
  }
  return out;
}

std::string mib(std::uint64_t bytes) {
  return fmt::format("{}", bytes >> 20);
}

template <class T>
nlohmann::json opt(const std::optional<T>& v) {
  return v ? nlohmann::json(*v) : nlohmann::json(nullptr);
}

std::string opt_text(const std::optional<std::uint64_t>& v) {
  return v ? fmt::format("{}", *v) : "-";
}

}  // namespace

nlohmann::json nodes_json(const policy::Topology& topo) {
  const auto roles = policy::classify_nodes(topo);
  nlohmann::json nodes = nlohmann::json::array();
  for (std::size_t i = 0; i < topo.nodes.size(); ++i) {
    const auto& n = topo.nodes[i];
    nlohmann::json dist = nlohmann::json::object();
    for (const auto& [to, d] : n.distance) dist[std::to_string(to)] = d;
    nlohmann::json access = nullptr;
    if (n.access) {
      access = {{"read_latency_ns", opt(n.access->read_latency_ns)},
                {"write_latency_ns", opt(n.access->write_latency_ns)},
                {"read_bandwidth_mbps", opt(n.access->read_bandwidth_mbps)},
                {"write_bandwidth_mbps", opt(n.access->write_bandwidth_mbps)}};
    }
    nodes.push_back({{"node", n.id},
                     {"cpus", n.cpus},
                     {"cpu_less", !n.has_cpus()},
                     {"mem_total_bytes", n.mem_total_bytes},
                     {"mem_free_bytes", n.mem_free_bytes},
                     {"mem_reserved_bytes", n.mem_reserved_bytes},
                     {"distance", dist},
                     {"access", access},
                     {"memory_tier", opt(n.memory_tier)},
                     {"demotion_target", roles[i].demotion_target},
                     {"reason", roles[i].reason},
                     {"demotes_to", opt(n.has_cpus() ? policy::preferred_demotion_target(topo, n.id)
                                                     : std::nullopt)}});
  }
  return {{"nodes", nodes}};
}

std::string nodes_label(const policy::Topology& topo) {
  const bool cxl = std::ranges::any_of(
      topo.nodes, [](const policy::NumaNode& n) { return !n.has_cpus() && n.has_memory(); });
  return std::string(kCxlMemoryLabel) + (cxl ? "=true" : "=false");
}

std::string nodes_table(const policy::Topology& topo) {
  const auto roles = policy::classify_nodes(topo);
  std::ostringstream out;
  out << fmt::format("{:<5} {:<8} {:>9} {:>9} {:<6} {:>7} {:>7} {:>8} {:>8} {:<13} {}\n", "NODE",
                     "CPUS", "TOTAL_MiB", "FREE_MiB", "TIER", "RD_LAT", "WR_LAT", "RD_MBps",
                     "WR_MBps", "DISTANCES", "ROLE");
  for (std::size_t i = 0; i < topo.nodes.size(); ++i) {
    const auto& n = topo.nodes[i];
    std::string dist;
    for (const auto& [to, d] : n.distance) dist += fmt::format("{}{}", dist.empty() ? "" : ",", d);
    const auto& a = n.access;
    std::string role = roles[i].demotion_target ? "demotion target" : "-";
    if (auto to = n.has_cpus() ? policy::preferred_demotion_target(topo, n.id) : std::nullopt) {
      role = fmt::format("demotes to node {}", *to);
    }
    out << fmt::format("{:<5} {:<8} {:>9} {:>9} {:<6} {:>7} {:>7} {:>8} {:>8} {:<13} {}\n", n.id,
                       cpu_ranges(n.cpus), mib(n.mem_total_bytes), mib(n.mem_free_bytes),
                       n.memory_tier ? fmt::format("{}", *n.memory_tier) : "-",
                       opt_text(a ? a->read_latency_ns : std::nullopt),
                       opt_text(a ? a->write_latency_ns : std::nullopt),
                       opt_text(a ? a->read_bandwidth_mbps : std::nullopt),
                       opt_text(a ? a->write_bandwidth_mbps : std::nullopt), dist, role);
  }
  out << '\n';
  for (const auto& r : roles) out << fmt::format("node {}: {}\n", r.node, r.reason);
  return out.str();
}

}  // namespace kvtier::agent
