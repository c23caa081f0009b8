#pragma once
// The units a config file speaks: durations ("30s"), sizes ("512MiB"), rates
// ("256MiB/s") and percentages ("90%"). Each parser returns why it refused, in
// words a config error message can quote.

#include <cstdint>
#include <expected>
#include <string>
#include <string_view>

#include "policy/types.hpp"

namespace kvtier::policy {

inline constexpr TimeNs kNsPerMs = 1'000'000;
inline constexpr TimeNs kNsPerSec = 1'000'000'000;

// "250ms", "30s", "1.5m", "2h" -> nanoseconds. A unit is required.
std::expected<TimeNs, std::string> parse_duration(std::string_view text);
// "4096B", "64KiB", "512MiB", "1.5GiB", "1TiB" -> bytes. A unit is required.
std::expected<std::uint64_t, std::string> parse_size(std::string_view text);
// "256MiB/s" -> bytes per second.
std::expected<std::uint64_t, std::string> parse_rate(std::string_view text);
// "90%" -> 0.9. Accepts 0% to 100%.
std::expected<double, std::string> parse_percent(std::string_view text);

// The inverse, for messages and `config check` summaries: the largest unit that
// keeps the number short ("512MiB", "1.5GiB", "30s", "250ms").
std::string format_size(std::uint64_t bytes);
std::string format_duration(TimeNs ns);

}  // namespace kvtier::policy
