#include "agent/movers/damos_mover.hpp"

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "agent/host/availability.hpp"
#include "agent/host/damon_sysfs.hpp"
#include "agent/host/host_paths.hpp"
#include "agent/host/procfs.hpp"
#include "agent/host/sysfs.hpp"
#include "policy/error.hpp"
#include "policy/types.hpp"

namespace kvtier::agent {
namespace {

namespace fs = std::filesystem;

std::string_view filter_type(DamosFilter::Type t) {
  switch (t) {
    case DamosFilter::Type::kAnon:
      return "anon";
    case DamosFilter::Type::kMemcg:
      return "memcg";
    case DamosFilter::Type::kYoung:
      return "young";
    case DamosFilter::Type::kAddr:
      return "addr";
    case DamosFilter::Type::kTarget:
      return "target";
  }
  return "anon";
}

}  // namespace

std::string_view to_string(DamosAction action) {
  switch (action) {
    case DamosAction::kMigrateCold:
      return "migrate_cold";
    case DamosAction::kMigrateHot:
      return "migrate_hot";
    case DamosAction::kStat:
      return "stat";
    case DamosAction::kPageout:
      return "pageout";
  }
  return "stat";
}

DamosMover::DamosMover(HostPaths host, DamosSetup setup)
    : host_(std::move(host)), setup_(std::move(setup)), damon_(DamonSysfs::under(host_)) {}

DamosMover::~DamosMover() {
  if (running_) {
    if (auto r = stop(); !r) spdlog::warn("damos: {}", r.error().message);
  }
}

Result<void> DamosMover::write(const fs::path& rel, std::string_view value) const {
  return damon_.write(damon_.kdamond_dir(kdamond()) / rel, value);
}

Availability DamosMover::probe(const HostPaths& host) {
  const auto nr = DamonSysfs::under(host).admin() / "kdamonds/nr_kdamonds";
  if (!fs::exists(nr)) {
    return {.ok = false,
            .why = fmt::format("{} missing: the kernel lacks CONFIG_DAMON_SYSFS (needs 6.11+ "
                               "for migrate_cold/migrate_hot)",
                               nr.string())};
  }
  return {.ok = true, .why = "DAMON sysfs present"};
}

namespace {

// The files (under the kdamond) and values that set up `schemes` in context 0.
std::vector<std::pair<fs::path, std::string>> scheme_writes(
    const std::vector<DamosScheme>& schemes) {
  std::vector<std::pair<fs::path, std::string>> w;
  const auto add = [&](fs::path rel, const auto& value) {
    if constexpr (std::is_convertible_v<decltype(value), std::string_view>) {
      w.emplace_back(std::move(rel), std::string(value));
    } else {
      w.emplace_back(std::move(rel), std::to_string(value));
    }
  };
  const fs::path c = "contexts/0";
  add(c / "schemes/nr_schemes", schemes.size());
  for (std::size_t i = 0; i < schemes.size(); ++i) {
    const auto& s = schemes[i];
    const fs::path d = c / "schemes" / std::to_string(i);
    add(d / "action", to_string(s.action));
    if (s.target_nid >= 0) add(d / "target_nid", s.target_nid);
    if (s.apply_interval_us > 0) add(d / "apply_interval_us", s.apply_interval_us);
    add(d / "access_pattern/sz/min", s.pattern.sz_min);
    add(d / "access_pattern/sz/max", s.pattern.sz_max);
    add(d / "access_pattern/nr_accesses/min", s.pattern.nr_accesses_min);
    add(d / "access_pattern/nr_accesses/max", s.pattern.nr_accesses_max);
    add(d / "access_pattern/age/min", s.pattern.age_min);
    add(d / "access_pattern/age/max", s.pattern.age_max);
    add(d / "quotas/ms", s.quota.ms);
    add(d / "quotas/bytes", s.quota.bytes);
    add(d / "quotas/reset_interval_ms", s.quota.reset_interval_ms);
    add(d / "quotas/weights/sz_permil", s.quota.weight_sz_permil);
    add(d / "quotas/weights/nr_accesses_permil", s.quota.weight_nr_accesses_permil);
    add(d / "quotas/weights/age_permil", s.quota.weight_age_permil);
    add(d / "watermarks/metric", "none");
    add(d / "filters/nr_filters", s.filters.size());
    for (std::size_t j = 0; j < s.filters.size(); ++j) {
      const auto& f = s.filters[j];
      const fs::path fd = d / "filters" / std::to_string(j);
      add(fd / "type", filter_type(f.type));
      add(fd / "matching", f.matching ? "Y" : "N");
      if (f.type == DamosFilter::Type::kMemcg) add(fd / "memcg_path", f.memcg_path);
      if (f.type == DamosFilter::Type::kAddr) {
        add(fd / "addr_start", f.addr.start);
        add(fd / "addr_end", f.addr.end);
      }
      if (f.type == DamosFilter::Type::kTarget) add(fd / "target_idx", f.target_idx);
    }
  }
  return w;
}

}  // namespace

Result<void> DamosMover::start() {
  if (auto st = damon_.state(kdamond()); st && *st == "on") {
    if (auto r = damon_.turn_off(kdamond()); !r) return r;
  }
  auto nr = damon_.nr_kdamonds();
  if (!nr) return std::unexpected(nr.error());
  if (*nr <= kdamond()) {
    if (auto r = damon_.set_nr_kdamonds(kdamond() + 1); !r) return r;
  }
  const DamonContextSpec context{
      .operations = setup_.operations,
      .intervals = {.sample_us = setup_.sample_us,
                    .aggr_us = setup_.aggr_us,
                    .update_us = setup_.update_us},
      .nr_regions = {.min = setup_.min_nr_regions, .max = setup_.max_nr_regions},
      .targets = {DamonTargetSpec{.pid = setup_.pid_target, .regions = setup_.regions}}};
  if (auto r = damon_.configure(kdamond(), context); !r) return r;
  // The schemes: a sequence of writes, each stopping at the first error (which names the file).
  const auto w = scheme_writes(setup_.schemes);
  for (const auto& [rel, value] : w) {
    if (auto r = write(rel, value); !r) {
      if (rel.filename() == "target_nid" && r.error().code == ENOENT) {
        return fail(
            fmt::format("{}; DAMOS target_nid needs Linux 6.11 or later", r.error().message),
            ENOENT);
      }
      return r;
    }
  }
  if (auto r = write("state", "on"); !r) {
    return fail(fmt::format("{} (check dmesg; the operations set '{}' or a region may be invalid)",
                            r.error().message, setup_.operations),
                r.error().code);
  }
  running_ = true;
  auto base = read_stats();
  if (!base) return std::unexpected(base.error());
  last_ = std::move(*base);
  spdlog::info("damos: kdamond {} on ({} operations, {} schemes)", setup_.kdamond,
               setup_.operations, setup_.schemes.size());
  return {};
}

Result<void> DamosMover::stop() {
  running_ = false;
  return write("state", "off");
}

Result<std::vector<DamosSchemeStats>> DamosMover::read_stats() {
  if (running_) {
    if (auto r = write("state", "update_schemes_stats"); !r) return std::unexpected(r.error());
  }
  std::vector<DamosSchemeStats> out;
  for (std::size_t i = 0; i < setup_.schemes.size(); ++i) {
    const fs::path d = damon_.context_dir(kdamond()) / "schemes" / std::to_string(i) / "stats";
    DamosSchemeStats s;
    for (auto [name, field] :
         {std::pair{"nr_tried", &s.nr_tried}, std::pair{"sz_tried", &s.sz_tried},
          std::pair{"nr_applied", &s.nr_applied}, std::pair{"sz_applied", &s.sz_applied},
          std::pair{"qt_exceeds", &s.qt_exceeds}}) {
      auto v = read_u64(d / name);
      if (!v) return std::unexpected(v.error());
      *field = *v;
    }
    out.push_back(s);
  }
  return out;
}

MoveStats DamosMover::move(Pid /*pid*/, std::span<const AddrRange> /*ranges*/, int to_node) {
  MoveStats st;
  if (!running_) {
    if (auto r = start(); !r) {
      spdlog::warn("damos: {}", r.error().message);
      st.last_errno = r.error().code;
      return st;
    }
  }
  auto now = read_stats();
  ++st.calls;
  if (!now) {
    spdlog::warn("damos: {}", now.error().message);
    st.last_errno = now.error().code;
    return st;
  }
  for (std::size_t i = 0; i < now->size() && i < setup_.schemes.size(); ++i) {
    if (setup_.schemes[i].target_nid != to_node) continue;
    const auto& a = (*now)[i];
    const DamosSchemeStats b = i < last_.size() ? last_[i] : DamosSchemeStats{};
    // Counters only grow while the kdamond runs; a restart resets them.
    const std::uint64_t tried = a.sz_tried >= b.sz_tried ? a.sz_tried - b.sz_tried : a.sz_tried;
    const std::uint64_t applied =
        a.sz_applied >= b.sz_applied ? a.sz_applied - b.sz_applied : a.sz_applied;
    st.requested += tried / kPageSize;
    st.moved += std::min(applied, tried) / kPageSize;
    st.bytes_moved += std::min(applied, tried);
    st.other += (tried - std::min(applied, tried)) / kPageSize;
  }
  last_ = std::move(*now);
  return st;
}

Result<std::vector<AddrRange>> DamosMover::node_physical_ranges(const HostPaths& host, int node) {
  const auto bs_path = host.sys / "devices/system/memory/block_size_bytes";
  auto bs_text = read_text(bs_path);
  if (!bs_text) return std::unexpected(bs_text.error());
  std::uint64_t block = 0;
  const auto [p, ec] =
      std::from_chars(bs_text->data(), bs_text->data() + bs_text->size(), block, 16);
  if (ec != std::errc{} || block == 0) {
    return fail(fmt::format("{}: expected a hex size, found '{}'", bs_path.string(), *bs_text));
  }
  const auto node_dir = host.sys / "devices/system/node" / fmt::format("node{}", node);
  std::error_code err;
  std::vector<std::uint64_t> ids;
  for (const auto& e : fs::directory_iterator(node_dir, err)) {
    const auto name = e.path().filename().string();
    if (name.rfind("memory", 0) != 0 || name.size() == 6) continue;
    std::uint64_t id = 0;
    const auto [q, ec2] = std::from_chars(name.data() + 6, name.data() + name.size(), id);
    if (ec2 == std::errc{} && q == name.data() + name.size()) ids.push_back(id);
  }
  if (err) {
    return fail(fmt::format("{}: cannot list: {}", node_dir.string(), err.message()), err.value());
  }
  std::sort(ids.begin(), ids.end());
  std::vector<AddrRange> ranges;
  for (const auto id : ids) {
    const std::uint64_t start = id * block;
    if (!ranges.empty() && ranges.back().end == start) {
      ranges.back().end = start + block;
    } else {
      ranges.push_back({.start = start, .end = start + block});
    }
  }
  if (ranges.empty()) {
    return fail(fmt::format("{}: no memory blocks (is node {} online with memory?)",
                            node_dir.string(), node));
  }
  return ranges;
}

Result<std::string> DamosMover::memcg_path_of(const HostPaths& host, Pid pid) {
  return read_cgroup(host, pid);
}

}  // namespace kvtier::agent
