#include "policy/config_reader.hpp"

#include <fmt/format.h>

#include <toml++/toml.h>
#include <algorithm>
#include <cstddef>
#include <expected>
#include <filesystem>
#include <fstream>
#include <ios>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>

#include "policy/config.hpp"
#include "policy/units.hpp"

namespace kvtier::policy::config_reader {

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

}  // namespace kvtier::policy::config_reader
