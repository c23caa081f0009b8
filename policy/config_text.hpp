// A config file's text before toml++ parses it: read with a bound, its size and nesting
// checked (config_reader.hpp's Sections read the parsed tree). Defined in config.cpp.
#pragma once

#include <expected>
#include <optional>
#include <string>
#include <string_view>

#include "policy/config.hpp"

namespace kvtier::policy::config_reader {

// No config value has a use for control characters; a NUL ("\u0000") would
// silently cut a path or a group name short where it reaches the C library.
std::string control_character(std::string_view s);

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
std::optional<ShapeProblem> check_shape(std::string_view text);

// The file's text, or the one problem that stops it being read: missing or
// unreadable, not a regular file (a directory reads as empty), or too large
// (read with a bound, so /dev/zero or a growing file cannot exhaust memory).
std::expected<std::string, ConfigProblem> read_file(const std::string& path);

}  // namespace kvtier::policy::config_reader
