// The config's reader: the toml++ tree as `Section`s, each key read by its kind (duration,
// size, rate, choice...) into a field, every problem kept with its file, line and key
// (the text before toml++ parses it: config_text.hpp). The schema (config_schema.cpp) says
// which keys there are; this file knows none of them. Internal to policy/.
#pragma once

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <toml++/toml.h>
#include <algorithm>
#include <cstdint>
#include <expected>
#include <functional>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "policy/config.hpp"
#include "policy/config_text.hpp"
#include "policy/types.hpp"
#include "policy/units.hpp"

namespace kvtier::policy::config_reader {

template <class T>
using Choices = std::vector<std::pair<std::string_view, T>>;

template <class T>
std::string choice_list(const Choices<T>& choices) {
  std::vector<std::string> names;
  for (const auto& c : choices) names.push_back(fmt::format("\"{}\"", c.first));
  return fmt::format("{}", fmt::join(names, ", "));
}

inline std::string_view type_name(const toml::node& n) {
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

inline int line_of(const toml::node& n) {
  return static_cast<int>(n.source().begin.line);
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

}  // namespace kvtier::policy::config_reader
