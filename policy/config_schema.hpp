// The config's schema: every key, its default (in config.hpp's structs), its range and the
// checks across keys, read through config_reader's `Section`s. Internal to policy/.
#pragma once

#include <string_view>
#include <utility>

#include "policy/config.hpp"

namespace kvtier::policy::config_schema {

// Parses as much as it can: the config with defaults where keys were wrong, and
// every problem found, so compile_config can still look at the rest.
std::pair<Config, ConfigProblems> parse_partial(std::string_view text, std::string_view file);

}  // namespace kvtier::policy::config_schema
