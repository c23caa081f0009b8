#include "agent/daemon/logging.hpp"

#include <fmt/format.h>
#include <spdlog/pattern_formatter.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include <ctime>
#include <memory>
#include <string>
#include <utility>

#include "policy/error.hpp"

namespace kvtier::agent {
namespace {

// sd-daemon(3) priorities: the journal reads them from the line's start.
class SdPriorityFlag : public spdlog::custom_flag_formatter {
 public:
  void format(const spdlog::details::log_msg& msg, const std::tm&,
              spdlog::memory_buf_t& dest) override {
    int prio = 6;
    switch (msg.level) {
      case spdlog::level::trace:
      case spdlog::level::debug:
        prio = 7;
        break;
      case spdlog::level::info:
        prio = 6;
        break;
      case spdlog::level::warn:
        prio = 4;
        break;
      case spdlog::level::err:
        prio = 3;
        break;
      case spdlog::level::critical:
        prio = 2;
        break;
      default:
        break;
    }
    const auto text = fmt::format("<{}>", prio);
    dest.append(text.data(), text.data() + text.size());
  }
  [[nodiscard]] std::unique_ptr<custom_flag_formatter> clone() const override {
    return std::make_unique<SdPriorityFlag>();
  }
};

}  // namespace

Result<void> setup_logging(LogStyle style, const std::string& level) {
  const auto lvl = spdlog::level::from_str(level);
  if (lvl == spdlog::level::off && level != "off") {
    return fail(fmt::format(
        "log level \"{}\" is not one of trace, debug, info, warn, error, critical, off", level));
  }
  auto logger = std::make_shared<spdlog::logger>("kvtierd",
                                                 std::make_shared<spdlog::sinks::stderr_sink_mt>());
  auto formatter = std::make_unique<spdlog::pattern_formatter>();
  if (style == LogStyle::kJournal) {
    formatter->add_flag<SdPriorityFlag>('*').set_pattern("%*%v");
  } else {
    formatter->set_pattern("%Y-%m-%d %H:%M:%S.%e %^%l%$ %v");
  }
  logger->set_formatter(std::move(formatter));
  logger->set_level(lvl);
  // Errors reach the journal at once even when the daemon dies right after.
  logger->flush_on(spdlog::level::warn);
  spdlog::set_default_logger(std::move(logger));
  return {};
}

}  // namespace kvtier::agent
