#pragma once
// kvtierd's logging: spdlog to stderr, which systemd hands to journald. Under
// systemd each line starts with an sd-daemon priority prefix ("<3>" error,
// "<4>" warning, "<6>" info, "<7>" debug) so journalctl filters by priority
// (-p warning) and timestamps are left to the journal; in the foreground
// lines carry a time and the level name.

#include <cstdint>
#include <string>

#include "policy/error.hpp"

namespace kvtier::agent {

enum class LogStyle : std::uint8_t { kJournal, kTerminal };

// `level` is one of trace, debug, info, warn, error, critical, off.
Result<void> setup_logging(LogStyle style, const std::string& level);

}  // namespace kvtier::agent
