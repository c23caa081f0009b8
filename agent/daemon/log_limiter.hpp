#pragma once
// Rate-limited logging for messages a peer can trigger at will (a refused
// connection, a dropped client): the journal gets the first few lines of each
// kind per window, then one summary line, "and N more", when the window ends.
// A local user must not be able to flood the journal through kvtierd.

#include <spdlog/spdlog.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>

#include "policy/types.hpp"

namespace kvtier::agent {

class LogLimiter {
 public:
  using Sink = std::function<void(spdlog::level::level_enum, const std::string&)>;

  struct Options {
    std::size_t burst = 5;              // lines of one kind logged per window
    TimeNs window = 10'000'000'000ULL;  // 10 s
  };

  // The default sink is spdlog's default logger.
  explicit LogLimiter(Options opts, Sink sink = {});

  // Logs `line` unless `kind` already logged `burst` lines in its window; then
  // counts it. Ends due windows first (see flush).
  void log(spdlog::level::level_enum level, std::string_view kind, const std::string& line,
           TimeNs now);
  // Ends every window older than `window`: one line per kind that held lines
  // back, "<kind>: N more not logged in the last 10s". Call it from a timer so
  // the summary comes even when the flood stops.
  void flush(TimeNs now);

  // Lines held back so far, all kinds, all windows (for tests and metrics).
  [[nodiscard]] std::uint64_t suppressed_total() const { return suppressed_total_; }

 private:
  struct Window {
    TimeNs start = 0;
    std::size_t logged = 0;
    std::uint64_t held = 0;
    spdlog::level::level_enum level = spdlog::level::warn;
  };
  void end_window(const std::string& kind, Window& w);

  Options opts_;
  Sink sink_;
  std::map<std::string, Window, std::less<>> windows_;
  std::uint64_t suppressed_total_ = 0;
};

}  // namespace kvtier::agent
