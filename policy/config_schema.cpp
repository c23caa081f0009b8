// The config's schema: every key, its range and the checks across keys, read through
// config_reader.hpp's Sections into config.hpp's structs (their defaults); then
// compile_config (config_compile.cpp) for the text-to-CompiledConfig calls.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <toml++/toml.h>
#include <algorithm>
#include <charconv>
#include <cstddef>
#include <cstdint>
#include <expected>
#include <limits>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include "policy/config.hpp"
#include "policy/config_reader.hpp"
#include "policy/config_text.hpp"
#include "policy/topology.hpp"
#include "policy/types.hpp"
#include "policy/units.hpp"

namespace kvtier::policy {

namespace {

using config_reader::choice_list;
using config_reader::Choices;
using config_reader::line_of;
using config_reader::Parser;
using config_reader::Section;
using config_reader::type_name;

const Choices<SourceKind> kSources{
    {"pmu", SourceKind::kPmu},         {"faults", SourceKind::kFault},
    {"damon", SourceKind::kDamon},     {"idle", SourceKind::kIdlePage},
    {"dirty", SourceKind::kSoftDirty}, {"pmu-soft", SourceKind::kPmuSoft}};
const Choices<MoverKind> kMovers{{"move_pages", MoverKind::kMovePages},
                                 {"dry-run", MoverKind::kDryRun}};
const Choices<LogLevel> kLevels{{"trace", LogLevel::kTrace}, {"debug", LogLevel::kDebug},
                                {"info", LogLevel::kInfo},   {"warn", LogLevel::kWarn},
                                {"error", LogLevel::kError}, {"off", LogLevel::kOff}};

std::string check_absolute(const std::string& s) {
  return s.starts_with('/') ? "" : fmt::format("\"{}\" is not an absolute path", s);
}

std::string check_listen(const std::string& s) {
  const auto colon = s.rfind(':');
  if (colon == std::string::npos || colon == 0) return fmt::format("\"{}\" has no HOST:", s);
  const std::string_view port = std::string_view(s).substr(colon + 1);
  unsigned v = 0;
  const auto [ptr, ec] = std::from_chars(port.data(), port.data() + port.size(), v);
  if (ec != std::errc{} || ptr != port.data() + port.size() || v == 0 || v > 65535) {
    return fmt::format("\"{}\" has no valid port", s);
  }
  return "";
}

std::expected<AddrRange, std::string> parse_addr_range(std::string_view s) {
  const auto dash = s.find('-');
  auto hex = [](std::string_view t) -> std::optional<std::uint64_t> {
    if (!t.starts_with("0x") && !t.starts_with("0X")) return std::nullopt;
    t.remove_prefix(2);
    std::uint64_t v = 0;
    const auto [ptr, ec] = std::from_chars(t.data(), t.data() + t.size(), v, 16);
    if (t.empty() || ec != std::errc{} || ptr != t.data() + t.size()) return std::nullopt;
    return v;
  };
  if (dash == std::string_view::npos) return std::unexpected(fmt::format("\"{}\" has no '-'", s));
  auto start = hex(s.substr(0, dash));
  auto end = hex(s.substr(dash + 1));
  if (!start || !end) return std::unexpected(fmt::format("\"{}\" is not two hex addresses", s));
  if (*start >= *end) return std::unexpected(fmt::format("\"{}\" is empty or reversed", s));
  // Whole pages: anything touching an excluded byte stays put. An end in the
  // last page of the address space cannot round up (2^64 does not fit): it
  // saturates at that page's start, which no process can map.
  constexpr std::uint64_t kLastPage = ~(kPageSize - 1);
  const std::uint64_t end_page =
      *end > kLastPage ? kLastPage : (*end + kPageSize - 1) & ~(kPageSize - 1);
  return AddrRange{.start = *start & ~(kPageSize - 1), .end = end_page};
}

constexpr TimeNs kMinute = 60 * kNsPerSec;
constexpr TimeNs kHour = 60 * kMinute;
constexpr TimeNs kDay = 24 * kHour;
constexpr std::uint64_t kTiB = 1ULL << 40;
constexpr std::uint64_t kMiB = 1ULL << 20;

void read_daemon(Section s, DaemonConfig& d) {
  s.duration("interval", d.interval, 100 * kNsPerMs, kHour);
  s.optional_duration("promote_interval", d.promote_interval, 100 * kNsPerMs, kHour);
  s.optional_duration("promote_wake", d.promote_wake, kNsPerMs, 10 * kNsPerSec);
  s.optional_duration("promote_yield", d.promote_yield, kNsPerMs, 10 * kNsPerSec);
  s.string("record", d.record, "an absolute path", check_absolute);
  s.size("record_max_bytes", d.record_max_bytes, 4096, 1ULL << 40);
  s.duration("record_max_duration", d.record_max_duration, kNsPerSec, kHour * 24 * 30);
  s.finish();
}

void read_logging(Section s, LoggingConfig& l) {
  s.choice("level", l.level, kLevels);
  s.finish();
}

void read_telemetry(Section s, TelemetryConfig& t) {
  s.string("socket", t.socket, "an absolute path", check_absolute);
  if (const toml::node* n = s.get("socket_mode")) {
    const auto* str = n->as_string();
    unsigned v = 0;
    bool good = false;
    if (str != nullptr) {
      const std::string& m = str->get();
      const auto [ptr, ec] = std::from_chars(m.data(), m.data() + m.size(), v, 8);
      // The owner (kvtierd) must be able to use its own socket.
      good =
          !m.empty() && ec == std::errc{} && ptr == m.data() + m.size() && v >= 0600 && v <= 0777;
    }
    if (good) {
      t.socket_mode = v;
    } else {
      s.problem(n, "socket_mode",
                "is not an octal permission string (allowed: \"0600\" to \"0777\", e.g. \"0660\")");
    }
  }
  s.string("socket_group", t.socket_group, "a group name",
           [](const std::string& g) { return g.empty() ? "is empty" : ""; });
  s.boolean("prometheus", t.prometheus);
  s.string("prometheus_listen", t.prometheus_listen, "HOST:PORT, e.g. \"127.0.0.1:9464\"",
           check_listen);
  s.boolean("prometheus_allow_non_loopback", t.prometheus_allow_non_loopback);
  s.finish();
}

void read_sources(Parser& p, Section s, SourcesConfig& c) {
  const std::string allowed = choice_list(kSources);
  std::vector<SourceKind> use;
  const bool has_use = s.array("use", allowed, [&](const toml::node& n, const std::string& k) {
    const auto* str = n.as_string();
    auto it = str == nullptr ? kSources.end()
                             : std::ranges::find(kSources, std::string_view(str->get()),
                                                 &std::pair<std::string_view, SourceKind>::first);
    if (it == kSources.end()) {
      p.problem(line_of(n), k, fmt::format("is not a hotness source (allowed: {})", allowed));
    } else if (std::ranges::find(use, it->second) != use.end()) {
      p.problem(
          line_of(n), k,
          fmt::format("\"{}\" is listed twice (allowed: each of {} once)", it->first, allowed));
    } else {
      use.push_back(it->second);
    }
  });
  if (has_use) c.use = use;
  if (const toml::node* n = s.get("force")) {
    const auto* str = n->as_string();
    if (str != nullptr && str->get().empty()) {
      c.force.reset();
    } else {
      auto it = str == nullptr ? kSources.end()
                               : std::ranges::find(kSources, std::string_view(str->get()),
                                                   &std::pair<std::string_view, SourceKind>::first);
      if (it == kSources.end()) {
        s.problem(n, "force", fmt::format("is not a hotness source (allowed: \"\", {})", allowed));
      } else {
        c.force = it->second;
      }
    }
  }
  s.integer("sample_period", c.sample_period, 1, 1'000'000'000);
  s.integer("max_samples_per_sec", c.max_samples_per_sec, 1, 10'000'000);
  s.auto_or_duration("damon_sample_interval", c.damon_sample_interval, 100'000, 10 * kNsPerSec);
  s.auto_or_duration("damon_aggr_interval", c.damon_aggr_interval, kNsPerMs, kMinute);
  s.auto_or_integer("damon_min_regions", c.damon_min_regions, 3, 1'000'000);
  s.auto_or_integer("damon_max_regions", c.damon_max_regions, 3, 1'000'000);
  s.duration("idle_scan_interval", c.idle_scan_interval, 100 * kNsPerMs, kHour);
  s.duration("dirty_scan_interval", c.dirty_scan_interval, 100 * kNsPerMs, kHour);
  s.boolean("dirty_beside_faults", c.dirty_beside_faults);
  s.finish();
  const toml::node* use_node = s.get("use");
  const bool literally_empty =
      use_node != nullptr && use_node->as_array() != nullptr && use_node->as_array()->empty();
  if (literally_empty && !c.force) {
    p.problem(s.line(), s.key("use"),
              fmt::format("is empty and no source is forced (allowed: some of {})", allowed));
  }
  if (c.damon_min_regions && c.damon_max_regions && *c.damon_min_regions > *c.damon_max_regions) {
    p.problem(s.line(), s.key("damon_min_regions"),
              fmt::format("{} is above damon_max_regions {} (allowed: at most damon_max_regions)",
                          *c.damon_min_regions, *c.damon_max_regions));
  }
  if (c.damon_sample_interval && c.damon_aggr_interval &&
      *c.damon_sample_interval > *c.damon_aggr_interval) {
    p.problem(s.line(), s.key("damon_sample_interval"),
              fmt::format("{} is longer than damon_aggr_interval {} (allowed: at most "
                          "damon_aggr_interval)",
                          format_duration(*c.damon_sample_interval),
                          format_duration(*c.damon_aggr_interval)));
  }
}

void read_limits(Section s, LimitsConfig& l) {
  s.rate("migrate_rate", l.migrate_rate, kPageSize, kTiB);
  // A burst below one huge page could never move a huge page.
  s.size("migrate_burst", l.migrate_burst, kHugePageSize, kTiB);
  s.percent("cxl_fill_max", l.cxl_fill_max, 0.0);
  s.size("min_free", l.min_free, 0, kTiB);
  s.percent_in("dram_headroom", l.dram_headroom, 0.0, 0.5);
  s.finish();
}

void read_tiering(Section s, TieringConfig& t) {
  const Choices<NumaBalancingMode> modes{{"tiering", NumaBalancingMode::kTiering},
                                         {"tiering-only", NumaBalancingMode::kTieringOnly},
                                         {"keep", NumaBalancingMode::kKeep}};
  s.choice("numa_balancing", t.numa_balancing, modes);
  s.keep_or_duration("promote_threshold", t.promote_threshold, kNsPerMs, kPromoteOnFirstAccess,
                     {{"auto", kPromoteAuto},
                      {"first-access", kPromoteOnFirstAccess},
                      {"kvtier", kPromoteByKvtier}});
  s.keep_or_duration("scan_period_min", t.scan_period_min, kNsPerMs, 3600 * kNsPerSec);
  s.keep_or_duration("scan_period_max", t.scan_period_max, kNsPerMs, 3600 * kNsPerSec);
  s.optional_size("scan_size", t.scan_size, kMiB, kTieringMaxScanSize, "keep", kMiB);
  s.optional_rate("promote_rate_limit", t.promote_rate_limit, kMiB, kTieringMaxPromoteRate, "keep",
                  kMiB);
  s.integer("max_hint_faults_per_sec", t.max_hint_faults_per_sec, 0, 100'000'000);
  if (t.scan_period_min && t.scan_period_max && *t.scan_period_min > *t.scan_period_max) {
    s.problem(
        s.get("scan_period_min"), "scan_period_min",
        fmt::format("{} is above scan_period_max {} (allowed: min <= max)",
                    format_duration(*t.scan_period_min), format_duration(*t.scan_period_max)));
  }
  s.finish();
}

void read_mover(Section s, MoverConfig& m) {
  // kvtierd does not drive DAMOS schemes: refused here, by the same check the
  // daemon runs, not after `config check` passed.
  if (const toml::node* k = s.get("kind"); k != nullptr && k->value<std::string>() == "damos") {
    s.problem(k, "kind",
              "\"damos\" is not a mover kvtierd runs (DAMOS schemes are not driven by kvtierd); "
              "use \"move_pages\" (the default) or \"dry-run\"");
  } else {
    s.choice("kind", m.kind, kMovers);
  }
  s.integer("batch_pages", m.batch_pages, 1, 65536);
  s.finish();
}

// Returns how many items the selector lists, valid or not.
std::size_t read_select(Parser& p, Section s, Selector& sel) {
  std::size_t items = 0;
  for (const char* k : {"comm", "cmdline", "exe", "cgroup", "pid"}) {
    if (const toml::node* n = s.get(k); n != nullptr) {
      items += n->as_array() != nullptr ? n->as_array()->size() : 1;
    }
  }
  s.string_array("comm", sel.comm, "regular expressions over the process name",
                 [](const std::string& r) { return r.empty() ? "is empty" : ""; });
  s.string_array("cmdline", sel.cmdline, "regular expressions over the command line",
                 [](const std::string& r) { return r.empty() ? "is empty" : ""; });
  s.string_array("exe", sel.exe, "absolute paths of executables", check_absolute);
  s.string_array("cgroup", sel.cgroup,
                 "absolute cgroup v2 paths, e.g. \"/system.slice/vllm.service\"", check_absolute);
  std::vector<Pid> pids;
  const bool has_pid = s.array(
      "pid", "process ids from 1 to 4194304", [&](const toml::node& n, const std::string& k) {
        const auto* i = n.as_integer();
        if (i == nullptr || i->get() < 1 || i->get() > 4194304) {
          p.problem(line_of(n), k, "is not a process id (allowed: integers from 1 to 4194304)");
          return;
        }
        pids.push_back(static_cast<Pid>(i->get()));
      });
  if (has_pid) sel.pid = pids;
  s.finish();
  return items;
}

void read_group_policy(Parser& p, Section s, GroupPolicy& g) {
  s.optional_duration("cold_age", g.cold_age, kNsPerSec, 30 * kDay);
  s.duration("cold_age_max", g.cold_age_max, kNsPerSec, 30 * kDay);
  s.percent_in("misdemotion_target", g.misdemotion_target, 0.001, 1.0);
  const toml::node* max_at = s.get("cold_age_max");
  // Unset, the ceiling is never below the floor (a long cold_age alone stays valid).
  if (g.cold_age && max_at == nullptr) g.cold_age_max = std::max(g.cold_age_max, *g.cold_age);
  if (g.cold_age && g.cold_age_max < *g.cold_age) {
    p.problem(line_of(*max_at), s.key("cold_age_max"),
              fmt::format("{} is below cold_age {} (allowed: cold_age_max >= cold_age)",
                          format_duration(g.cold_age_max), format_duration(*g.cold_age)));
  }
  s.duration("half_life", g.half_life, 100 * kNsPerMs, kDay);
  s.boolean("promote", g.promote);
  s.boolean("promote_groups", g.promote_groups);
  s.percent_in("group_hit_rate_min", g.group_hit_rate_min, 0.01, 1.0);
  s.number("promote_heat", g.promote_heat, 0.0, 1e9);
  s.number("demote_heat", g.demote_heat, 0.0, 1e9);
  s.duration("min_residence", g.min_residence, 0, kDay);
  s.optional_size("dram_limit", g.dram_limit, kPageSize, 1024 * kTiB);
  s.optional_size("keep_free", g.keep_free, kPageSize, 1024 * kTiB);
  std::vector<AddrRange> exclude;
  const bool has_exclude = s.array(
      "exclude", "\"0xSTART-0xEND\" virtual address ranges",
      [&](const toml::node& n, const std::string& k) {
        const auto* str = n.as_string();
        auto r = str == nullptr ? std::expected<AddrRange, std::string>(
                                      std::unexpected(fmt::format("is {}", type_name(n))))
                                : parse_addr_range(str->get());
        if (!r) {
          p.problem(line_of(n), k,
                    fmt::format("{} (allowed: \"0xSTART-0xEND\" with START < END)", r.error()));
          return;
        }
        exclude.push_back(*r);
      });
  if (has_exclude) {
    // Sorted and merged: the planner looks up one neighbour on each side, so
    // a range nested in a larger one must not hide it.
    std::ranges::sort(exclude, {}, &AddrRange::start);
    g.exclude.clear();
    for (const auto& r : exclude) {
      if (!g.exclude.empty() && r.start <= g.exclude.back().end) {
        g.exclude.back().end = std::max(g.exclude.back().end, r.end);
      } else {
        g.exclude.push_back(r);
      }
    }
  }
  s.finish();
  if (g.promote && g.promote_heat <= g.demote_heat) {
    const toml::node* at =
        s.get("promote_heat") != nullptr ? s.get("promote_heat") : s.get("demote_heat");
    p.problem(at != nullptr ? line_of(*at) : s.line(), s.key("promote_heat"),
              fmt::format("{}/s is not above demote_heat {}/s: pages would ping-pong (allowed: "
                          "promote_heat > demote_heat, or promote = false)",
                          g.promote_heat, g.demote_heat));
  }
  if (!g.cold_age && !g.promote && !g.dram_limit && !g.keep_free) {
    p.problem(s.line(), s.path(),
              "every policy is off: the group would never move anything (allowed: set cold_age, "
              "dram_limit or keep_free, or promote = true)");
  }
}

void read_group(Parser& p, Config& cfg, Section s, std::set<std::string>& names) {
  GroupConfig g;
  const std::string name_allowed = "a unique name of letters, digits, '_', '-' and '.'";
  if (s.get("name") == nullptr) {
    p.problem(s.line(), s.key("name"), fmt::format("is missing (allowed: {})", name_allowed));
  }
  s.string("name", g.name, name_allowed, [&](const std::string& n) -> std::string {
    if (n.empty()) return "is empty";
    const bool ok = std::ranges::all_of(n, [](char c) {
      return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
             c == '_' || c == '-' || c == '.';
    });
    if (!ok) return fmt::format("\"{}\" has characters other than letters, digits, _ - .", n);
    if (!names.insert(n).second) return fmt::format("\"{}\" names another group too", n);
    return "";
  });
  s.integer("priority", g.priority, -1000, 1000);
  if (const toml::node* n = s.get("demotion_node")) {
    const auto* str = n->as_string();
    const auto* i = n->as_integer();
    if (str != nullptr && str->get() == "auto") {
      g.demotion_node.reset();
    } else if (i != nullptr && i->get() >= 0 && i->get() < 1024) {
      g.demotion_node = static_cast<int>(i->get());
    } else {
      s.problem(n, "demotion_node",
                "is not a node (allowed: \"auto\" or a NUMA node id from 0 to 1023)");
    }
  }
  std::size_t select_items = 0;
  if (const toml::table* t = s.table("select")) {
    select_items = read_select(p, Section(p, *t, s.key("select")), g.select);
  }
  if (select_items == 0) {
    p.problem(s.line(), s.key("select"),
              "selects no process (allowed: at least one of comm, cmdline, exe, cgroup, pid)");
  }
  if (const toml::table* t = s.table("policy")) {
    read_group_policy(p, Section(p, *t, s.key("policy")), g.policy);
  } else {
    // Defaults still have to make sense together.
    toml::table empty;
    read_group_policy(p, Section(p, empty, s.key("policy")), g.policy);
  }
  s.finish();
  if (g.policy.cold_age && *g.policy.cold_age < cfg.daemon.interval) {
    const int line = cfg.line_of(s.key("policy.cold_age"));
    p.problem(
        line != 0 ? line : s.line(), s.key("policy.cold_age"),
        fmt::format("{} is shorter than daemon.interval {}: it cannot be observed (allowed: "
                    "at least daemon.interval)",
                    format_duration(*g.policy.cold_age), format_duration(cfg.daemon.interval)));
  }
  cfg.groups.push_back(std::move(g));
}

void read_root(Parser& p, Config& cfg, const toml::table& root) {
  Section s(p, root, "");
  if (const toml::table* t = s.table("daemon")) read_daemon(Section(p, *t, "daemon"), cfg.daemon);
  if (const toml::table* t = s.table("logging"))
    read_logging(Section(p, *t, "logging"), cfg.logging);
  if (const toml::table* t = s.table("telemetry")) {
    read_telemetry(Section(p, *t, "telemetry"), cfg.telemetry);
  }
  if (const toml::table* t = s.table("sources")) {
    read_sources(p, Section(p, *t, "sources"), cfg.sources);
  }
  if (const toml::table* t = s.table("limits")) read_limits(Section(p, *t, "limits"), cfg.limits);
  if (const toml::table* t = s.table("tiering")) {
    read_tiering(Section(p, *t, "tiering"), cfg.tiering);
  }
  if (const toml::table* t = s.table("mover")) read_mover(Section(p, *t, "mover"), cfg.mover);
  std::set<std::string> names;
  const toml::node* groups = s.get("group");
  if (groups == nullptr) {
    p.problem(1, "group",
              "is missing: kvtier would manage nothing (allowed: one or more [[group]] tables)");
  } else if (const auto* arr = groups->as_array(); arr == nullptr || !arr->is_array_of_tables()) {
    p.problem(line_of(*groups), "group", "is not an array of tables (allowed: [[group]] tables)");
  } else {
    for (std::size_t i = 0; i < arr->size(); ++i) {
      const std::string key = fmt::format("group[{}]", i);
      const auto& t = *(*arr)[i].as_table();
      p.note_line(key, line_of(t));
      read_group(p, cfg, Section(p, t, key), names);
    }
  }
  s.finish();
}

std::pair<Config, ConfigProblems> parse_partial(std::string_view text, std::string_view file) {
  Config cfg;
  cfg.file = std::string(file);
  Parser p(cfg.file, cfg);
  if (auto bad = config_reader::check_shape(text)) {
    p.problem(bad->line, "", bad->message);
    return {std::move(cfg), p.take_problems()};
  }
  toml::table root;
  try {
    root = toml::parse(text, file);
  } catch (const toml::parse_error& e) {
    p.problem(static_cast<int>(e.source().begin.line), "",
              fmt::format("TOML syntax error: {}", e.description()));
    return {std::move(cfg), p.take_problems()};
  }
  read_root(p, cfg, root);
  return {std::move(cfg), p.take_problems()};
}

}  // namespace

std::expected<Config, ConfigProblems> parse_config(std::string_view text, std::string_view file) {
  auto [cfg, problems] = parse_partial(text, file);
  if (!problems.empty()) return std::unexpected(std::move(problems));
  return cfg;
}

std::expected<Config, ConfigProblems> load_config(const std::string& path) {
  auto text = config_reader::read_file(path);
  if (!text) return std::unexpected(ConfigProblems{text.error()});
  return parse_config(*text, path);
}

std::expected<CompiledConfig, ConfigProblems> compile_config_text(std::string_view text,
                                                                  std::string_view file,
                                                                  const Topology* topo) {
  auto [cfg, problems] = parse_partial(text, file);
  const bool syntax_error = problems.size() == 1 && problems[0].key.empty();
  if (syntax_error) return std::unexpected(std::move(problems));
  auto compiled = compile_config(std::move(cfg), topo);
  if (problems.empty() && compiled) return compiled;
  if (!compiled) {
    problems.insert(problems.end(), compiled.error().begin(), compiled.error().end());
  }
  std::ranges::stable_sort(problems, {}, &ConfigProblem::line);
  return std::unexpected(std::move(problems));
}

std::expected<CompiledConfig, ConfigProblems> load_compiled_config(const std::string& path,
                                                                   const Topology* topo) {
  auto text = config_reader::read_file(path);
  if (!text) return std::unexpected(ConfigProblems{text.error()});
  return compile_config_text(*text, path, topo);
}

std::optional<SourceKind> source_kind(std::string_view name) {
  for (const auto& [n, kind] : kSources) {
    if (n == name) return kind;
  }
  return std::nullopt;
}

}  // namespace kvtier::policy
