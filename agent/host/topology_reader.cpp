#include "agent/host/topology_reader.hpp"

#include <fmt/format.h>
#include <algorithm>
#include <charconv>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include "agent/host/host_paths.hpp"
#include "agent/host/sysfs.hpp"
#include "policy/error.hpp"
#include "policy/topology.hpp"

namespace kvtier::agent {
namespace fs = std::filesystem;

namespace {

// "Node 0 MemTotal:       24609592 kB" -> bytes for the named field.
Result<std::uint64_t> meminfo_field(const std::string& text, std::string_view field,
                                    const fs::path& path) {
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    const auto key = line.find(fmt::format("{}:", field));
    if (key == std::string::npos) continue;
    std::istringstream rest(line.substr(key + field.size() + 1));
    std::uint64_t value = 0;
    std::string unit;
    if (!(rest >> value >> unit) || unit != "kB") {
      return fail(
          fmt::format("{}: malformed line '{}'; expected '<number> kB'", path.string(), line));
    }
    return value * 1024;
  }
  return fail(fmt::format("{}: no {} line", path.string(), field));
}

Result<std::vector<int>> read_distances(const fs::path& path) {
  auto text = read_text(path);
  if (!text) return std::unexpected(text.error());
  std::vector<int> out;
  std::istringstream in(*text);
  std::string word;
  while (in >> word) {
    int v = 0;
    auto [ptr, ec] = std::from_chars(word.data(), word.data() + word.size(), v);
    if (ec != std::errc{} || ptr != word.data() + word.size() || v <= 0) {
      return fail(fmt::format("{}: malformed distance '{}'; expected positive numbers",
                              path.string(), word));
    }
    out.push_back(v);
  }
  return out;
}

Result<std::optional<policy::AccessAttrs>> read_access(const fs::path& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return std::optional<policy::AccessAttrs>{};
  policy::AccessAttrs attrs;
  const std::pair<const char*, std::optional<std::uint64_t>*> fields[] = {
      {"read_latency", &attrs.read_latency_ns},
      {"write_latency", &attrs.write_latency_ns},
      {"read_bandwidth", &attrs.read_bandwidth_mbps},
      {"write_bandwidth", &attrs.write_bandwidth_mbps},
  };
  for (const auto& [name, slot] : fields) {
    const fs::path file = dir / name;
    if (!fs::exists(file, ec)) continue;
    auto v = read_u64(file);
    if (!v) return std::unexpected(v.error());
    *slot = *v;
  }
  return std::optional<policy::AccessAttrs>{attrs};
}

// memory_tierN/nodelist for every tier, as node -> N.
Result<std::map<int, int>> read_memory_tiers(const fs::path& dir) {
  std::map<int, int> tier_of;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return tier_of;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    constexpr std::string_view prefix = "memory_tier";
    if (!name.starts_with(prefix)) continue;
    int tier = 0;
    const char* first = name.data() + prefix.size();
    const char* last = name.data() + name.size();
    auto [ptr, perr] = std::from_chars(first, last, tier);
    if (perr != std::errc{} || ptr != last) continue;  // memory_tiering's own attributes
    const fs::path nodelist = entry.path() / "nodelist";
    auto text = read_text(nodelist);
    if (!text) return std::unexpected(text.error());
    auto nodes = parse_id_list(*text, nodelist.string());
    if (!nodes) return std::unexpected(nodes.error());
    for (int n : *nodes) tier_of[n] = tier;
  }
  if (ec) return fail(fmt::format("{}: cannot list: {}", dir.string(), ec.message()), ec.value());
  return tier_of;
}

}  // namespace

Result<policy::Topology> read_topology(const HostPaths& paths) {
  const fs::path node_dir = paths.sys / "devices/system/node";
  const fs::path online_path = node_dir / "online";
  auto online_text = read_text(online_path);
  if (!online_text) {
    return fail(
        fmt::format("{} (is sysfs mounted at {}? a kernel without NUMA has no node directory)",
                    online_text.error().message, paths.sys.string()),
        online_text.error().code);
  }
  auto online = parse_id_list(*online_text, online_path.string());
  if (!online) return std::unexpected(online.error());
  if (online->empty()) return fail(fmt::format("{}: no node is online", online_path.string()));

  auto tiers = read_memory_tiers(paths.sys / "devices/virtual/memory_tiering");
  if (!tiers) return std::unexpected(tiers.error());

  policy::Topology topo;
  for (int id : *online) {
    const fs::path dir = node_dir / fmt::format("node{}", id);
    policy::NumaNode node{.id = id};

    const fs::path cpulist = dir / "cpulist";
    auto cpus_text = read_text(cpulist);
    if (!cpus_text) return std::unexpected(cpus_text.error());
    auto cpus = parse_id_list(*cpus_text, cpulist.string());
    if (!cpus) return std::unexpected(cpus.error());
    node.cpus = std::move(*cpus);

    const fs::path meminfo = dir / "meminfo";
    auto mem = read_text(meminfo);
    if (!mem) return std::unexpected(mem.error());
    auto total = meminfo_field(*mem, "MemTotal", meminfo);
    if (!total) return std::unexpected(total.error());
    auto free = meminfo_field(*mem, "MemFree", meminfo);
    if (!free) return std::unexpected(free.error());
    node.mem_total_bytes = *total;
    node.mem_free_bytes = *free;

    const fs::path distance = dir / "distance";
    auto dist = read_distances(distance);
    if (!dist) return std::unexpected(dist.error());
    if (dist->size() != online->size()) {
      return fail(fmt::format("{}: {} distances for {} online nodes", distance.string(),
                              dist->size(), online->size()));
    }
    for (std::size_t i = 0; i < online->size(); ++i) node.distance[(*online)[i]] = (*dist)[i];

    auto access = read_access(dir / "access0/initiators");
    if (!access) return std::unexpected(access.error());
    node.access = *access;

    if (auto it = tiers->find(id); it != tiers->end()) node.memory_tier = it->second;
    topo.nodes.push_back(std::move(node));
  }
  std::ranges::sort(topo.nodes, {}, &policy::NumaNode::id);
  return topo;
}

}  // namespace kvtier::agent
