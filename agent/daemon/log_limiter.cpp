#include "agent/daemon/log_limiter.hpp"

#include <fmt/format.h>

#include <utility>

#include "policy/types.hpp"
#include "policy/units.hpp"

namespace kvtier::agent {

LogLimiter::LogLimiter(Options opts, Sink sink) : opts_(opts), sink_(std::move(sink)) {
  if (!sink_) {
    sink_ = [](spdlog::level::level_enum level, const std::string& line) {
      spdlog::log(level, "{}", line);
    };
  }
}

void LogLimiter::log(spdlog::level::level_enum level, std::string_view kind,
                     const std::string& line, TimeNs now) {
  flush(now);
  auto it = windows_.find(kind);
  if (it == windows_.end()) {
    it = windows_.emplace(std::string(kind), Window{.start = now, .level = level}).first;
  }
  Window& w = it->second;
  if (w.logged < opts_.burst) {
    ++w.logged;
    sink_(level, line);
    return;
  }
  ++w.held;
  ++suppressed_total_;
  w.level = level;
}

void LogLimiter::flush(TimeNs now) {
  for (auto it = windows_.begin(); it != windows_.end();) {
    if (now - it->second.start < opts_.window) {
      ++it;
      continue;
    }
    end_window(it->first, it->second);
    it = windows_.erase(it);
  }
}

void LogLimiter::end_window(const std::string& kind, Window& w) {
  if (w.held == 0) return;
  sink_(w.level, fmt::format("{}: and {} more not logged in the last {}", kind, w.held,
                             policy::format_duration(opts_.window)));
}

}  // namespace kvtier::agent
