// The config's compiler (a parsed Config into what the daemon runs: the selectors' regular
// expressions compiled, the groups in match order, nodes checked against the topology), the
// problems' wording, a file's text before it is parsed (config_text.hpp), and what compares
// two configs. The reader is config_reader.hpp, the schema config_schema.cpp.
#include "policy/config.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <re2/re2.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <expected>
#include <filesystem>
#include <fstream>
#include <ios>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include "policy/config_text.hpp"
#include "policy/topology.hpp"
#include "policy/types.hpp"
#include "policy/units.hpp"

namespace kvtier::policy {

namespace {

// Control characters (a NUL from "\u0000" in a TOML string, a newline) would
// cut a message short in C APIs or split it in the journal: show them escaped.
std::string printable(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (const char c : text) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7f) {
      out += fmt::format("\\x{:02x}", u);
    } else {
      out += c;
    }
  }
  return out;
}

// Keeps both ends of a very long line: the start names the value, the end says
// what is allowed.
constexpr std::size_t kMaxProblemLineBytes = 1024;
std::string elide_middle(std::string text) {
  if (text.size() <= kMaxProblemLineBytes) return text;
  constexpr std::size_t kKeep = kMaxProblemLineBytes / 2;
  const std::size_t cut = text.size() - 2 * kKeep;
  return fmt::format("{}...({} bytes not shown)...{}", std::string_view(text).substr(0, kKeep), cut,
                     std::string_view(text).substr(text.size() - kKeep));
}

}  // namespace

std::string ConfigProblem::to_string() const {
  if (key.empty()) return elide_middle(printable(fmt::format("{}:{}: {}", file, line, message)));
  return elide_middle(printable(fmt::format("{}:{}: {}: {}", file, line, key, message)));
}

std::vector<std::string> problem_lines(const ConfigProblems& problems, std::size_t max_lines) {
  std::vector<std::string> lines;
  const std::size_t shown =
      problems.size() <= max_lines ? problems.size() : (max_lines > 0 ? max_lines - 1 : 0);
  lines.reserve(shown + 1);
  for (std::size_t i = 0; i < shown; ++i) lines.push_back(problems[i].to_string());
  if (shown < problems.size()) {
    lines.push_back(elide_middle(printable(
        fmt::format("{}: and {} more problem(s) (fix these and check again: kvtierctl config "
                    "check FILE)",
                    problems.front().file, problems.size() - shown))));
  }
  return lines;
}

int Config::line_of(const std::string& key) const {
  auto it = lines.find(key);
  return it == lines.end() ? 0 : it->second;
}

DamonIntervalsNs damon_intervals(const Config& c) {
  std::optional<TimeNs> shortest;
  for (const auto& g : c.groups) {
    if (g.policy.cold_age)
      shortest = std::min(shortest.value_or(*g.policy.cold_age), *g.policy.cold_age);
  }
  const TimeNs cold = shortest.value_or(10 * kNsPerSec);
  DamonIntervalsNs out{.sample = c.sources.damon_sample_interval.value_or(cold / 10),
                       .aggr = c.sources.damon_aggr_interval.value_or(cold / 2)};
  out.aggr = std::max(out.aggr, out.sample);
  return out;
}

std::vector<std::string> keys_needing_restart(const Config& running, const Config& next) {
  std::vector<std::string> keys;
  const auto check = [&](bool changed, const char* key) {
    if (changed) keys.emplace_back(key);
  };
  check(running.telemetry.socket != next.telemetry.socket, "telemetry.socket");
  check(running.telemetry.socket_mode != next.telemetry.socket_mode, "telemetry.socket_mode");
  check(running.telemetry.socket_group != next.telemetry.socket_group, "telemetry.socket_group");
  check(running.mover.kind != next.mover.kind, "mover.kind");
  check(running.mover.batch_pages != next.mover.batch_pages, "mover.batch_pages");
  return keys;
}

bool sources_changed(const Config& running, const Config& next) {
  const SourcesConfig& a = running.sources;
  const SourcesConfig& b = next.sources;
  const DamonIntervalsNs da = damon_intervals(running);
  const DamonIntervalsNs db = damon_intervals(next);
  return a.use != b.use || a.force != b.force || a.sample_period != b.sample_period ||
         a.max_samples_per_sec != b.max_samples_per_sec || da.sample != db.sample ||
         da.aggr != db.aggr || a.damon_min_regions != b.damon_min_regions ||
         a.damon_max_regions != b.damon_max_regions ||
         a.idle_scan_interval != b.idle_scan_interval ||
         a.dirty_scan_interval != b.dirty_scan_interval ||
         a.dirty_beside_faults != b.dirty_beside_faults;
}

std::string_view source_name(SourceKind s) {
  switch (s) {
    case SourceKind::kPmu:
      return "pmu";
    case SourceKind::kPmuSoft:
      return "pmu-soft";
    case SourceKind::kFault:
      return "faults";
    case SourceKind::kDamon:
      return "damon";
    case SourceKind::kIdlePage:
      return "idle";
    case SourceKind::kSoftDirty:
      return "dirty";
  }
  return "?";
}

std::string_view mover_name(MoverKind m) {
  switch (m) {
    case MoverKind::kMovePages:
      return "move_pages";
    case MoverKind::kDryRun:
      return "dry-run";
  }
  return "?";
}

std::string_view log_level_name(LogLevel l) {
  switch (l) {
    case LogLevel::kTrace:
      return "trace";
    case LogLevel::kDebug:
      return "debug";
    case LogLevel::kInfo:
      return "info";
    case LogLevel::kWarn:
      return "warn";
    case LogLevel::kError:
      return "error";
    case LogLevel::kOff:
      return "off";
  }
  return "?";
}

// --- the compiler: a parsed Config into what the daemon runs --------------------------
namespace {

// Byte semantics (Latin-1), as /proc gives bytes: a command line need not be
// UTF-8. Errors come back as values; RE2 must not write to stderr itself.
RE2::Options regex_options() {
  RE2::Options o;
  o.set_encoding(RE2::Options::EncodingLatin1);
  o.set_log_errors(false);
  // Bounds the compiled program and its DFA cache; a pattern that needs more
  // fails to compile, and matching falls back to the (still linear) NFA.
  o.set_max_mem(std::int64_t{4} << 20);
  return o;
}

}  // namespace

std::expected<TargetMatcher, std::string> TargetMatcher::compile(const Selector& s) {
  TargetMatcher m;
  auto compile_all = [](const std::vector<std::string>& in,
                        std::vector<std::shared_ptr<const RE2>>& out,
                        std::string_view what) -> std::string {
    static const RE2::Options kOptions = regex_options();
    for (std::size_t i = 0; i < in.size(); ++i) {
      auto re = std::make_shared<const RE2>(in[i], kOptions);
      if (!re->ok()) {
        return fmt::format("{}[{}]\t\"{}\" is not a valid regular expression: {}", what, i, in[i],
                           re->error());
      }
      out.push_back(std::move(re));
    }
    return "";
  };
  if (auto why = compile_all(s.comm, m.comm_, "comm"); !why.empty()) return std::unexpected(why);
  if (auto why = compile_all(s.cmdline, m.cmdline_, "cmdline"); !why.empty()) {
    return std::unexpected(why);
  }
  m.exe_ = s.exe;
  m.cgroup_ = s.cgroup;
  m.pid_ = s.pid;
  return m;
}

bool TargetMatcher::matches(const ProcessInfo& p) const {
  if (std::ranges::find(pid_, p.pid) != pid_.end()) return true;
  if (std::ranges::find(exe_, p.exe) != exe_.end()) return true;
  for (const auto& c : cgroup_) {
    // The cgroup itself or anything below it, never a sibling sharing a prefix.
    if (p.cgroup == c || (p.cgroup.starts_with(c) && (c == "/" || p.cgroup[c.size()] == '/'))) {
      return true;
    }
  }
  // Bounded here too: a ProcessInfo need not come from read_process.
  const std::string_view comm = std::string_view(p.comm).substr(0, kMaxCmdlineBytes);
  const std::string_view cmdline = std::string_view(p.cmdline).substr(0, kMaxCmdlineBytes);
  for (const auto& r : comm_) {
    if (RE2::PartialMatch(comm, *r)) return true;
  }
  for (const auto& r : cmdline_) {
    if (RE2::PartialMatch(cmdline, *r)) return true;
  }
  return false;
}

std::optional<std::size_t> CompiledConfig::group_of(const ProcessInfo& p) const {
  for (const auto& g : match_order) {
    if (g.matcher.matches(p)) return g.index;
  }
  return std::nullopt;
}

std::expected<CompiledConfig, ConfigProblems> compile_config(Config config, const Topology* topo) {
  ConfigProblems problems;
  auto add = [&](const std::string& key, std::string message) {
    problems.push_back(ConfigProblem{.file = config.file,
                                     .line = config.line_of(key),
                                     .key = key,
                                     .message = std::move(message)});
  };
  CompiledConfig out;
  for (std::size_t i = 0; i < config.groups.size(); ++i) {
    const GroupConfig& g = config.groups[i];
    const std::string base = fmt::format("group[{}]", i);
    auto m = TargetMatcher::compile(g.select);
    if (!m) {
      const auto tab = m.error().find('\t');
      add(fmt::format("{}.select.{}", base, m.error().substr(0, tab)),
          m.error().substr(tab + 1) + " (allowed: RE2 regular expressions)");
    } else {
      out.match_order.push_back(CompiledGroup{.index = i, .matcher = std::move(*m)});
    }
    if (topo != nullptr && g.demotion_node) {
      const NumaNode* n = topo->find(*g.demotion_node);
      std::vector<int> ids;
      for (const auto& node : topo->nodes) {
        if (node.has_memory()) ids.push_back(node.id);
      }
      const std::string allowed =
          fmt::format("\"auto\" or a node with memory: {}", fmt::join(ids, ", "));
      if (n == nullptr) {
        add(base + ".demotion_node",
            fmt::format("node {} does not exist on this host (allowed: {})", *g.demotion_node,
                        allowed));
      } else if (!n->has_memory()) {
        add(base + ".demotion_node",
            fmt::format("node {} has no memory (allowed: {})", *g.demotion_node, allowed));
      }
    }
  }
  if (!problems.empty()) return std::unexpected(std::move(problems));
  std::ranges::stable_sort(out.match_order, [&](const CompiledGroup& a, const CompiledGroup& b) {
    return config.groups[a.index].priority > config.groups[b.index].priority;
  });
  out.config = std::move(config);
  return out;
}

namespace config_reader {

std::string control_character(std::string_view s) {
  for (const char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7f) {
      return fmt::format("has the control character \\x{:02x}, which no value may contain", u);
    }
  }
  return "";
}

std::optional<ShapeProblem> check_shape(std::string_view text) {
  if (text.size() > kMaxConfigBytes) {
    return ShapeProblem{
        .line = 0,
        .message = fmt::format("is larger than {} (allowed: at most {})",
                               format_size(kMaxConfigBytes), format_size(kMaxConfigBytes))};
  }
  int line = 1;
  int brackets = 0;
  int dots = 0;
  std::size_t i = 0;
  auto too_deep = [&] {
    return ShapeProblem{
        .line = line,
        .message = fmt::format("nested more than {} levels deep (brackets, braces and dotted key "
                               "parts together; allowed: at most {})",
                               kMaxConfigDepth, kMaxConfigDepth)};
  };
  // Skips a string starting at text[i] (a quote); counts its newlines.
  auto skip_string = [&] {
    const char q = text[i];
    const bool multi = text.substr(i, 3) == std::string(3, q);
    i += multi ? 3 : 1;
    while (i < text.size()) {
      const char c = text[i];
      if (c == '\n') {
        if (!multi) return;  // toml++ reports the unterminated string
        ++line;
      } else if (c == '\\' && q == '"') {
        ++i;  // the escaped character, whatever it is
        if (i < text.size() && text[i] == '\n') ++line;
      } else if (c == q && (!multi || text.substr(i, 3) == std::string(3, q))) {
        i += multi ? 3 : 1;
        // A multi-line string may end with up to two more quotes of its kind.
        while (multi && i < text.size() && text[i] == q) ++i;
        return;
      }
      ++i;
    }
  };
  while (i < text.size()) {
    const char c = text[i];
    switch (c) {
      case '"':
      case '\'':
        skip_string();
        continue;
      case '#':
        while (i < text.size() && text[i] != '\n') ++i;
        continue;
      case '\n':
        ++line;
        dots = 0;
        break;
      case '[':
      case '{':
        ++brackets;
        dots = 0;
        break;
      case ']':
      case '}':
        brackets = std::max(0, brackets - 1);
        dots = 0;
        break;
      case '=':
      case ',':
        dots = 0;
        break;
      case '.':
        ++dots;
        break;
      default:
        break;
    }
    if (brackets + dots > kMaxConfigDepth) return too_deep();
    ++i;
  }
  return std::nullopt;
}

std::expected<std::string, ConfigProblem> read_file(const std::string& path) {
  auto problem = [&](std::string message) {
    return std::unexpected(
        ConfigProblem{.file = path, .line = 0, .key = "", .message = std::move(message)});
  };
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    return problem("is a directory, not a config file (give the path of the TOML file)");
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) return problem("cannot read the file (check the path and its permissions)");
  std::string text(kMaxConfigBytes + 1, '\0');
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  if (in.bad()) return problem("cannot read the file (check the path and its permissions)");
  text.resize(static_cast<std::size_t>(in.gcount()));
  if (text.size() > kMaxConfigBytes) {
    return problem(fmt::format("is larger than {} (allowed: a config file of at most {})",
                               format_size(kMaxConfigBytes), format_size(kMaxConfigBytes)));
  }
  return text;
}

}  // namespace config_reader

}  // namespace kvtier::policy
