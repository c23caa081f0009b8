#include "policy/config.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <re2/re2.h>
#include <toml++/toml.h>
#include <algorithm>
#include <charconv>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <initializer_list>
#include <ios>
#include <limits>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

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

namespace {

template <class T>
using Choices = std::vector<std::pair<std::string_view, T>>;

const Choices<SourceKind> kSources{
    {"pmu", SourceKind::kPmu},         {"faults", SourceKind::kFault},
    {"damon", SourceKind::kDamon},     {"idle", SourceKind::kIdlePage},
    {"dirty", SourceKind::kSoftDirty}, {"pmu-soft", SourceKind::kPmuSoft}};
const Choices<MoverKind> kMovers{{"move_pages", MoverKind::kMovePages},
                                 {"dry-run", MoverKind::kDryRun}};
const Choices<LogLevel> kLevels{{"trace", LogLevel::kTrace}, {"debug", LogLevel::kDebug},
                                {"info", LogLevel::kInfo},   {"warn", LogLevel::kWarn},
                                {"error", LogLevel::kError}, {"off", LogLevel::kOff}};

template <class T>
std::string choice_list(const Choices<T>& choices) {
  std::vector<std::string> names;
  for (const auto& c : choices) names.push_back(fmt::format("\"{}\"", c.first));
  return fmt::format("{}", fmt::join(names, ", "));
}

std::string_view type_name(const toml::node& n) {
  switch (n.type()) {
    case toml::node_type::table:
      return "a table";
    case toml::node_type::array:
      return "an array";
    case toml::node_type::string:
      return "a string";
    case toml::node_type::integer:
      return "an integer";
    case toml::node_type::floating_point:
      return "a float";
    case toml::node_type::boolean:
      return "a boolean";
    case toml::node_type::date:
      return "a date";
    case toml::node_type::time:
      return "a time";
    case toml::node_type::date_time:
      return "a date-time";
    case toml::node_type::none:
      break;
  }
  return "nothing";
}

int line_of(const toml::node& n) {
  return static_cast<int>(n.source().begin.line);
}

// No config value has a use for control characters; a NUL ("\u0000") would
// silently cut a path or a group name short where it reaches the C library.
std::string control_character(std::string_view s) {
  for (const char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7f) {
      return fmt::format("has the control character \\x{:02x}, which no value may contain", u);
    }
  }
  return "";
}

class Parser {
 public:
  Parser(std::string file, Config& cfg) : file_(std::move(file)), cfg_(cfg) {}

  void problem(int line, std::string key, std::string message) {
    problems_.push_back(ConfigProblem{
        .file = file_, .line = line, .key = std::move(key), .message = std::move(message)});
  }
  void note_line(const std::string& key, int line) { cfg_.lines[key] = line; }
  ConfigProblems take_problems() { return std::move(problems_); }
  [[nodiscard]] bool ok() const { return problems_.empty(); }

 private:
  std::string file_;
  Config& cfg_;
  ConfigProblems problems_;
};

// One TOML table being read: every key asked for is remembered, so finish()
// can call every other key unknown and list the allowed ones.
class Section {
 public:
  Section(Parser& p, const toml::table& t, std::string path)
      : p_(p), t_(t), path_(std::move(path)) {}

  [[nodiscard]] std::string key(std::string_view k) const {
    return path_.empty() ? std::string(k) : fmt::format("{}.{}", path_, k);
  }
  [[nodiscard]] int line() const { return line_of(t_); }
  [[nodiscard]] const std::string& path() const { return path_; }

  const toml::node* get(std::string_view k) {
    if (std::ranges::find(known_, k) == known_.end()) known_.emplace_back(k);
    const toml::node* n = t_.get(k);
    if (n != nullptr) p_.note_line(key(k), line_of(*n));
    return n;
  }

  void problem(const toml::node* n, std::string_view k, std::string message) {
    p_.problem(n != nullptr ? line_of(*n) : line(), key(k), std::move(message));
  }

  // A string parsed by `parse` (returns expected<T, string>) then checked by `check`.
  template <class T, class ParseFn>
  bool parsed(std::string_view k, T& out, ParseFn parse, std::string_view allowed,
              const std::function<std::string(const T&)>& check = {}) {
    const toml::node* n = get(k);
    if (n == nullptr) return false;
    const auto* s = n->as_string();
    if (s == nullptr) {
      problem(n, k, fmt::format("is {}, expected a string (allowed: {})", type_name(*n), allowed));
      return false;
    }
    if (std::string why = control_character(s->get()); !why.empty()) {
      problem(n, k, fmt::format("{} (allowed: {})", why, allowed));
      return false;
    }
    auto v = parse(std::string_view(s->get()));
    if (!v) {
      problem(n, k, fmt::format("{} (allowed: {})", v.error(), allowed));
      return false;
    }
    if (check) {
      if (std::string why = check(*v); !why.empty()) {
        problem(n, k, fmt::format("{} (allowed: {})", why, allowed));
        return false;
      }
    }
    out = *v;
    return true;
  }

  void duration(std::string_view k, TimeNs& out, TimeNs lo, TimeNs hi) {
    const std::string allowed = fmt::format("a duration from {} to {}, e.g. \"30s\"",
                                            format_duration(lo), format_duration(hi));
    parsed<TimeNs>(k, out, parse_duration, allowed, [&](const TimeNs& v) {
      return v < lo || v > hi ? fmt::format("{} is out of range", format_duration(v)) : "";
    });
  }

  // `none` (nullopt: "off", "keep", "auto"), `word` (for `word_value`), or a
  // duration from lo to hi.
  // A word for nullopt (`none`), a word for each of `words`' values, or a
  // duration from lo to hi (the words' values are not range-checked).
  void word_or_duration(std::string_view k, std::optional<TimeNs>& out, TimeNs lo, TimeNs hi,
                        std::string_view none,
                        std::initializer_list<std::pair<std::string_view, TimeNs>> words = {}) {
    std::string listed = fmt::format("\"{}\"", none);
    for (const auto& [w, v] : words) listed += fmt::format(", \"{}\"", w);
    const std::string allowed = fmt::format("{} or a duration from {} to {}", listed,
                                            format_duration(lo), format_duration(hi));
    bool is_word = false;
    auto parse = [&](std::string_view t) -> std::expected<std::optional<TimeNs>, std::string> {
      is_word = true;
      if (t == none) return std::optional<TimeNs>{};
      for (const auto& [w, v] : words) {
        if (t == w) return std::optional<TimeNs>{v};
      }
      is_word = false;
      auto d = parse_duration(t);
      if (!d) return std::unexpected(d.error());
      return std::optional<TimeNs>{*d};
    };
    parsed<std::optional<TimeNs>>(k, out, parse, allowed, [&](const std::optional<TimeNs>& v) {
      return !is_word && v && (*v < lo || *v > hi)
                 ? fmt::format("{} is out of range", format_duration(*v))
                 : std::string{};
    });
  }

  // A duration, or "off" for nullopt.
  void optional_duration(std::string_view k, std::optional<TimeNs>& out, TimeNs lo, TimeNs hi) {
    word_or_duration(k, out, lo, hi, "off");
  }

  // "keep" (nullopt: the host's value stays), `word` (for `word_value`), or a duration.
  void keep_or_duration(std::string_view k, std::optional<TimeNs>& out, TimeNs lo, TimeNs hi,
                        std::initializer_list<std::pair<std::string_view, TimeNs>> words = {}) {
    word_or_duration(k, out, lo, hi, "keep", words);
  }

  // "auto" (nullopt) or a duration from lo to hi.
  void auto_or_duration(std::string_view k, std::optional<TimeNs>& out, TimeNs lo, TimeNs hi) {
    word_or_duration(k, out, lo, hi, "auto");
  }

  // "auto" (nullopt) or an integer from lo to hi.
  void auto_or_integer(std::string_view k, std::optional<std::uint32_t>& out, std::int64_t lo,
                       std::int64_t hi) {
    const toml::node* n = get(k);
    if (n == nullptr) return;
    const std::string allowed = fmt::format("\"auto\" or an integer from {} to {}", lo, hi);
    if (const auto* str = n->as_string(); str != nullptr && str->get() == "auto") {
      out.reset();
      return;
    }
    const auto* i = n->as_integer();
    if (i == nullptr) {
      problem(n, k, fmt::format("is {}, expected {}", type_name(*n), allowed));
    } else if (i->get() < lo || i->get() > hi) {
      problem(n, k, fmt::format("{} is out of range (allowed: {})", i->get(), allowed));
    } else {
      out = static_cast<std::uint32_t>(i->get());
    }
  }

  void size(std::string_view k, std::uint64_t& out, std::uint64_t lo, std::uint64_t hi) {
    const std::string allowed =
        fmt::format("a size from {} to {}, e.g. \"512MiB\"", format_size(lo), format_size(hi));
    parsed<std::uint64_t>(k, out, parse_size, allowed, [&](const std::uint64_t& v) {
      return v < lo || v > hi ? fmt::format("{} is out of range", format_size(v)) : "";
    });
  }

  // `word` (nullopt) or a size from lo to hi, a multiple of `unit`.
  void optional_size(std::string_view k, std::optional<std::uint64_t>& out, std::uint64_t lo,
                     std::uint64_t hi, std::string_view word = "off", std::uint64_t unit = 1) {
    optional_quantity(k, out, {.lo = lo, .hi = hi, .unit = unit, .noun = "size", .suffix = ""},
                      word, parse_size);
  }

  void rate(std::string_view k, std::uint64_t& out, std::uint64_t lo, std::uint64_t hi) {
    const std::string allowed = fmt::format("a rate from {}/s to {}/s, e.g. \"256MiB/s\"",
                                            format_size(lo), format_size(hi));
    parsed<std::uint64_t>(k, out, parse_rate, allowed, [&](const std::uint64_t& v) {
      return v < lo || v > hi ? fmt::format("{}/s is out of range", format_size(v)) : "";
    });
  }

  // `word` (nullopt) or a rate from lo to hi per second, a multiple of `unit`.
  void optional_rate(std::string_view k, std::optional<std::uint64_t>& out, std::uint64_t lo,
                     std::uint64_t hi, std::string_view word, std::uint64_t unit) {
    optional_quantity(k, out, {.lo = lo, .hi = hi, .unit = unit, .noun = "rate", .suffix = "/s"},
                      word, parse_rate);
  }

  struct Bounds {
    std::uint64_t lo = 0;
    std::uint64_t hi = 0;
    std::uint64_t unit = 1;
    std::string_view noun;    // "size", "rate"
    std::string_view suffix;  // after each value: "", "/s"
  };
  // `word` (nullopt) or a quantity `parse` reads, within `b`.
  template <typename Parse>
  void optional_quantity(std::string_view k, std::optional<std::uint64_t>& out, const Bounds& b,
                         std::string_view word, Parse parse_value) {
    const auto shown = [&b](std::uint64_t v) { return format_size(v) + std::string(b.suffix); };
    const std::string allowed =
        fmt::format("\"{}\" or a {} from {} to {}{}", word, b.noun, shown(b.lo), shown(b.hi),
                    b.unit > 1 ? fmt::format(" in whole {}", format_size(b.unit)) : "");
    auto parse =
        [word, parse_value](
            std::string_view t) -> std::expected<std::optional<std::uint64_t>, std::string> {
      if (t == word) return std::optional<std::uint64_t>{};
      auto v = parse_value(t);
      if (!v) return std::unexpected(v.error());
      return std::optional<std::uint64_t>{*v};
    };
    parsed<std::optional<std::uint64_t>>(
        k, out, parse, allowed, [&](const std::optional<std::uint64_t>& v) {
          if (v && (*v < b.lo || *v > b.hi)) return fmt::format("{} is out of range", shown(*v));
          if (v && *v % b.unit != 0) {
            return fmt::format("{} is not a whole number of {}", shown(*v), format_size(b.unit));
          }
          return std::string{};
        });
  }

  void percent(std::string_view k, double& out, double lo_exclusive) {
    const std::string allowed =
        fmt::format("a percentage above {}% up to 100%, e.g. \"90%\"", lo_exclusive * 100);
    parsed<double>(k, out, parse_percent, allowed, [&](const double& v) {
      return v <= lo_exclusive ? fmt::format("{}% is out of range", v * 100) : "";
    });
  }

  // A percentage from lo to hi, both included.
  void percent_in(std::string_view k, double& out, double lo, double hi) {
    const std::string allowed =
        fmt::format("a percentage from {}% to {}%, e.g. \"{}%\"", lo * 100, hi * 100, hi * 10);
    parsed<double>(k, out, parse_percent, allowed, [&](const double& v) {
      return v < lo || v > hi ? fmt::format("{}% is out of range", v * 100) : "";
    });
  }

  template <class T>
  void integer(std::string_view k, T& out, std::int64_t lo, std::int64_t hi) {
    const toml::node* n = get(k);
    if (n == nullptr) return;
    const std::string allowed = fmt::format("an integer from {} to {}", lo, hi);
    const auto* i = n->as_integer();
    if (i == nullptr) {
      problem(n, k, fmt::format("is {}, expected {}", type_name(*n), allowed));
      return;
    }
    if (i->get() < lo || i->get() > hi) {
      problem(n, k, fmt::format("{} is out of range (allowed: {})", i->get(), allowed));
      return;
    }
    out = static_cast<T>(i->get());
  }

  void number(std::string_view k, double& out, double lo, double hi) {
    const toml::node* n = get(k);
    if (n == nullptr) return;
    const std::string allowed = fmt::format("a number from {} to {}", lo, hi);
    double v = 0;
    if (const auto* f = n->as_floating_point()) {
      v = f->get();
    } else if (const auto* i = n->as_integer()) {
      v = static_cast<double>(i->get());
    } else {
      problem(n, k, fmt::format("is {}, expected {}", type_name(*n), allowed));
      return;
    }
    if (!(v >= lo && v <= hi)) {
      problem(n, k, fmt::format("{} is out of range (allowed: {})", v, allowed));
      return;
    }
    out = v;
  }

  void boolean(std::string_view k, bool& out) {
    const toml::node* n = get(k);
    if (n == nullptr) return;
    if (const auto* b = n->as_boolean()) {
      out = b->get();
    } else {
      problem(n, k, fmt::format("is {}, expected a boolean (allowed: true, false)", type_name(*n)));
    }
  }

  template <class T>
  void choice(std::string_view k, T& out, const Choices<T>& choices) {
    auto parse = [&](std::string_view t) -> std::expected<T, std::string> {
      for (const auto& [name, value] : choices) {
        if (name == t) return value;
      }
      return std::unexpected(fmt::format("\"{}\" is not a known value", t));
    };
    parsed<T>(k, out, parse, choice_list(choices));
  }

  // A plain string; `check` returns why it is wrong, or "".
  void string(std::string_view k, std::string& out, std::string_view allowed,
              const std::function<std::string(const std::string&)>& check = {}) {
    auto parse = [](std::string_view t) -> std::expected<std::string, std::string> {
      return std::string(t);
    };
    parsed<std::string>(k, out, parse, allowed, check);
  }

  // An array whose items are read by `item(node, key_path)`; returns false if not an array.
  bool array(std::string_view k, std::string_view allowed,
             const std::function<void(const toml::node&, const std::string&)>& item) {
    const toml::node* n = get(k);
    if (n == nullptr) return false;
    const auto* arr = n->as_array();
    if (arr == nullptr) {
      problem(n, k, fmt::format("is {}, expected an array (allowed: {})", type_name(*n), allowed));
      return false;
    }
    for (std::size_t i = 0; i < arr->size(); ++i) {
      const std::string item_key = fmt::format("{}[{}]", key(k), i);
      p_.note_line(item_key, line_of((*arr)[i]));
      item((*arr)[i], item_key);
    }
    return true;
  }

  // Strings in an array, each checked by `check` (returns why it is wrong, or "").
  void string_array(std::string_view k, std::vector<std::string>& out, std::string_view allowed,
                    const std::function<std::string(const std::string&)>& check = {}) {
    std::vector<std::string> items;
    const bool present = array(k, allowed, [&](const toml::node& n, const std::string& key_path) {
      const auto* s = n.as_string();
      if (s == nullptr) {
        p_.problem(line_of(n), key_path,
                   fmt::format("is {}, expected a string (allowed: {})", type_name(n), allowed));
        return;
      }
      std::string why = control_character(s->get());
      if (why.empty() && check) why = check(s->get());
      if (!why.empty()) {
        p_.problem(line_of(n), key_path, fmt::format("{} (allowed: {})", why, allowed));
        return;
      }
      items.push_back(s->get());
    });
    if (present) out = std::move(items);
  }

  const toml::table* table(std::string_view k) {
    const toml::node* n = get(k);
    if (n == nullptr) return nullptr;
    const auto* t = n->as_table();
    if (t == nullptr) {
      problem(n, k, fmt::format("is {}, expected a table [{}]", type_name(*n), key(k)));
    }
    return t;
  }

  void finish() {
    for (auto&& [k, v] : t_) {
      if (std::ranges::find(known_, k.str()) != known_.end()) continue;
      p_.problem(line_of(v), key(k.str()),
                 fmt::format("unknown key (allowed: {})", fmt::join(known_, ", ")));
    }
  }

 private:
  Parser& p_;
  const toml::table& t_;
  std::string path_;
  std::vector<std::string> known_;
};

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

}  // namespace

namespace {

struct ShapeProblem {
  int line = 0;
  std::string message;
};

// Size and nesting, measured before toml++ parses: toml++ recurses once per
// nesting level and once per part of a dotted key (`[a.a.a...]`), so a deep
// file would overflow the stack instead of being refused. Depth counts open
// brackets and braces plus the dots of the key or value being read, outside
// strings and comments; a float's dot counts too, which only makes the
// measure safer. kvtier's own schema is 5 deep at most.
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

// Parses as much as it can: the config with defaults where keys were wrong, and
// every problem found, so compile_config can still look at the rest.
std::pair<Config, ConfigProblems> parse_partial(std::string_view text, std::string_view file) {
  Config cfg;
  cfg.file = std::string(file);
  Parser p(cfg.file, cfg);
  if (auto bad = check_shape(text)) {
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

// The file's text, or the one problem that stops it being read: missing or
// unreadable, not a regular file (a directory reads as empty), or too large
// (read with a bound, so /dev/zero or a growing file cannot exhaust memory).
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

}  // namespace

std::expected<Config, ConfigProblems> parse_config(std::string_view text, std::string_view file) {
  auto [cfg, problems] = parse_partial(text, file);
  if (!problems.empty()) return std::unexpected(std::move(problems));
  return cfg;
}

std::expected<Config, ConfigProblems> load_config(const std::string& path) {
  auto text = read_file(path);
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
  auto text = read_file(path);
  if (!text) return std::unexpected(ConfigProblems{text.error()});
  return compile_config_text(*text, path, topo);
}

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

std::optional<SourceKind> source_kind(std::string_view name) {
  for (const auto& [n, kind] : kSources) {
    if (n == name) return kind;
  }
  return std::nullopt;
}

}  // namespace kvtier::policy
