#include "agent/host/topology_reader.hpp"

#include <fmt/format.h>
#include <unistd.h>

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

Result<std::vector<int>> read_distances(const fs::path& path) {
  auto text = read_text(path);
  if (!text) return std::unexpected(text.error());
  return parse_distances(*text, path.string());
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

// One zone of /proc/zoneinfo, as far as the reserve needs it.
struct Zone {
  std::string name;
  std::optional<std::uint64_t> free;
  std::optional<std::uint64_t> high;
  std::uint64_t boost = 0;
  std::vector<std::uint64_t> protection;
};

// One word of zoneinfo as a number (parse_u64); nullopt if it is none.
std::optional<std::uint64_t> number(std::string_view word) {
  auto v = parse_u64(word, "zoneinfo");
  return v ? std::optional<std::uint64_t>(*v) : std::nullopt;
}

// The next word of `rest` (split at spaces, tabs and the characters in
// `also`), which loses it; empty at the end.
std::string_view next_word(std::string_view& rest, std::string_view also = {}) {
  const auto sep = [&](char c) { return c == ' ' || c == '\t' || also.find(c) != also.npos; };
  std::size_t i = 0;
  while (i < rest.size() && sep(rest[i])) ++i;
  std::size_t j = i;
  while (j < rest.size() && !sep(rest[j])) ++j;
  const std::string_view word = rest.substr(i, j - i);
  rest.remove_prefix(j);
  return word;
}

// "(0, 1918, 1918, 1918, 1918)" -> its numbers.
std::optional<std::vector<std::uint64_t>> protection_list(std::string_view text) {
  std::vector<std::uint64_t> out;
  for (auto word = next_word(text, "(),"); !word.empty(); word = next_word(text, "(),")) {
    auto v = number(word);
    if (!v) return std::nullopt;
    out.push_back(*v);
  }
  return out;
}

// The /proc/zoneinfo beside the sysfs tree; an absent one (a fixture tree, a
// kernel without it) reserves nothing.
Result<std::map<int, std::uint64_t>> read_zone_reserves(const HostPaths& paths) {
  const fs::path file = paths.proc / "zoneinfo";
  std::error_code ec;
  if (!fs::exists(file, ec)) return std::map<int, std::uint64_t>{};
  auto text = read_text(file);
  if (!text) return std::unexpected(text.error());
  const long page = sysconf(_SC_PAGESIZE);
  return parse_zone_reserves(*text, page > 0 ? static_cast<std::uint64_t>(page) : 4096,
                             file.string());
}

// The node's meminfo (total, free) and its reserve from `reserves`.
Result<void> read_node_memory(const fs::path& dir, const std::map<int, std::uint64_t>& reserves,
                              policy::NumaNode& node) {
  const fs::path meminfo = dir / "meminfo";
  auto mem = read_text(meminfo);
  if (!mem) return std::unexpected(mem.error());
  auto total = parse_meminfo_field(*mem, "MemTotal", meminfo.string());
  if (!total) return std::unexpected(total.error());
  auto free = parse_meminfo_field(*mem, "MemFree", meminfo.string());
  if (!free) return std::unexpected(free.error());
  node.mem_total_bytes = *total;
  node.mem_free_bytes = *free;
  auto it = reserves.find(node.id);
  node.mem_reserved_bytes = it != reserves.end() ? std::min(it->second, *free) : 0;
  return {};
}

}  // namespace

Result<std::map<int, std::uint64_t>> parse_zone_reserves(std::string_view text,
                                                         std::uint64_t page_bytes,
                                                         std::string_view what) {
  std::map<int, std::vector<Zone>> zones;
  Zone* zone = nullptr;
  std::size_t line_no = 0;
  std::string_view line;
  const auto bad = [&](std::string_view why) {
    return fail(fmt::format("{}:{}: {}: '{}'", what, line_no, why, line.substr(0, 80)));
  };
  // The number that is the next word of `rest`.
  const auto value = [](std::string_view rest) { return number(next_word(rest)); };
  while (!text.empty()) {
    ++line_no;
    line = take_line(text);
    std::string_view rest = line;
    const std::string_view first = next_word(rest);
    if (first.empty()) continue;
    if (first == "Node") {
      // "Node 0, zone      DMA"
      std::string_view id_word = next_word(rest);
      const std::string_view zone_word = next_word(rest);
      const std::string_view name = next_word(rest);
      if (id_word.empty() || id_word.back() != ',' || zone_word != "zone" || name.empty()) {
        return bad("expected 'Node N, zone NAME'");
      }
      id_word.remove_suffix(1);
      auto id = number(id_word);
      if (!id || *id > 1U << 20) return bad("expected 'Node N, zone NAME'");
      auto& list = zones[static_cast<int>(*id)];
      list.push_back(Zone{.name = std::string(name)});
      zone = &list.back();
      continue;
    }
    if (zone == nullptr) continue;  // before the first zone
    if (first == "pages") {
      if (next_word(rest) != "free") continue;
      zone->free = value(rest);
      if (!zone->free) return bad("malformed 'pages free'");
    } else if (first == "high" || first == "boost") {
      auto v = value(rest);
      if (!v) return bad("malformed watermark");
      if (first == "high") {
        zone->high = v;
      } else {
        zone->boost = *v;
      }
    } else if (first == "protection:") {
      auto p = protection_list(rest);
      if (!p) return bad("malformed protection");
      zone->protection = std::move(*p);
    }
  }
  std::map<int, std::uint64_t> out;
  for (const auto& [node, list] : zones) {
    // Movable allocations (user pages) are held to the lowmem reserve of the
    // highest zone they may use: ZONE_MOVABLE, the node's "Movable" zone.
    auto movable = std::ranges::find(list, std::string("Movable"), &Zone::name);
    const std::size_t idx =
        movable != list.end() ? static_cast<std::size_t>(movable - list.begin()) : list.size() - 1;
    std::uint64_t pages = 0;
    for (const auto& z : list) {
      if (!z.free || !z.high) {
        return fail(fmt::format("{}: node {} zone {} has no 'pages free' or 'high' line", what,
                                node, z.name));
      }
      const std::uint64_t keep =
          *z.high + z.boost + (idx < z.protection.size() ? z.protection[idx] : 0);
      pages += std::min(*z.free, keep);
    }
    out[node] = pages * page_bytes;
  }
  return out;
}

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
  auto reserves = read_zone_reserves(paths);
  if (!reserves) return std::unexpected(reserves.error());

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

    if (auto ok = read_node_memory(dir, *reserves, node); !ok) return std::unexpected(ok.error());

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

Result<std::uint64_t> parse_meminfo_field(std::string_view text, std::string_view field,
                                          std::string_view what) {
  const std::string key = fmt::format("{}:", field);
  while (!text.empty()) {
    const std::string_view line = take_line(text);
    const auto at = line.find(key);
    if (at == std::string_view::npos) continue;
    std::string_view rest = line.substr(at + key.size());
    const std::string_view digits = next_word(rest);
    const std::string_view unit = next_word(rest);
    std::uint64_t value = 0;
    const auto [ptr, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
    // Bytes must fit in 64 bits: kB above 2^54 would wrap.
    if (digits.empty() || ec != std::errc{} || ptr != digits.data() + digits.size() ||
        unit != "kB" || value > (~std::uint64_t{0} >> 10)) {
      return fail(fmt::format("{}: malformed line '{}'; expected '<number> kB'", what,
                              line.substr(0, 120)));
    }
    return value * 1024;
  }
  return fail(fmt::format("{}: no {} line", what, field));
}

Result<std::vector<int>> parse_distances(std::string_view text, std::string_view what) {
  std::vector<int> out;
  std::istringstream in{std::string(text)};
  std::string word;
  while (in >> word) {
    int v = 0;
    auto [ptr, ec] = std::from_chars(word.data(), word.data() + word.size(), v);
    if (ec != std::errc{} || ptr != word.data() + word.size() || v <= 0) {
      return fail(fmt::format("{}: malformed distance '{}'; expected positive numbers", what,
                              word.substr(0, 32)));
    }
    out.push_back(v);
  }
  return out;
}

Result<void> refresh_node_memory(const HostPaths& paths, policy::Topology& topo) {
  const fs::path node_dir = paths.sys / "devices/system/node";
  auto reserves = read_zone_reserves(paths);
  if (!reserves) return std::unexpected(reserves.error());
  for (auto& node : topo.nodes) {
    if (auto ok = read_node_memory(node_dir / fmt::format("node{}", node.id), *reserves, node);
        !ok) {
      return ok;
    }
  }
  return {};
}

}  // namespace kvtier::agent
