#include "policy/config.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

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

}  // namespace kvtier::policy
