#include "policy/units.hpp"

#include <fmt/format.h>

#include <array>
#include <charconv>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>

#include "policy/types.hpp"

namespace kvtier::policy {
namespace {

struct Unit {
  std::string_view name;
  double factor;
};

constexpr std::array kDurationUnits{Unit{"ms", 1e6}, Unit{"s", 1e9}, Unit{"m", 60e9},
                                    Unit{"h", 3600e9}};
constexpr std::array kSizeUnits{Unit{"B", 1.0}, Unit{"KiB", 1024.0}, Unit{"MiB", 1048576.0},
                                Unit{"GiB", 1073741824.0}, Unit{"TiB", 1099511627776.0}};

// Splits "1.5GiB" into 1.5 and "GiB"; the number must be non-negative decimal.
std::expected<std::pair<double, std::string_view>, std::string> split_number(
    std::string_view text) {
  std::size_t i = 0;
  while (i < text.size() && ((text[i] >= '0' && text[i] <= '9') || text[i] == '.')) ++i;
  if (i == 0) return std::unexpected(fmt::format("\"{}\" does not start with a number", text));
  double value = 0;
  const std::string number(text.substr(0, i));
  const auto [ptr, ec] = std::from_chars(number.data(), number.data() + number.size(), value);
  if (ec != std::errc{} || ptr != number.data() + number.size()) {
    return std::unexpected(fmt::format("\"{}\" is not a number", text.substr(0, i)));
  }
  return std::pair{value, text.substr(i)};
}

template <std::size_t N>
std::expected<double, std::string> parse_with_units(std::string_view text,
                                                    const std::array<Unit, N>& units,
                                                    std::string_view units_text) {
  auto split = split_number(text);
  if (!split) return std::unexpected(split.error());
  const auto [value, unit] = *split;
  for (const auto& u : units) {
    if (u.name == unit) {
      const double scaled = value * u.factor;
      if (!std::isfinite(scaled) ||
          scaled >= static_cast<double>(std::numeric_limits<std::uint64_t>::max())) {
        return std::unexpected(fmt::format("\"{}\" is too large", text));
      }
      return scaled;
    }
  }
  if (unit.empty()) {
    return std::unexpected(fmt::format("\"{}\" has no unit (one of {})", text, units_text));
  }
  return std::unexpected(
      fmt::format("\"{}\" has unknown unit \"{}\" (one of {})", text, unit, units_text));
}

std::string trim_number(double v) {
  std::string s = fmt::format("{:.2f}", v);
  while (s.back() == '0') s.pop_back();
  if (s.back() == '.') s.pop_back();
  return s;
}

}  // namespace

std::expected<TimeNs, std::string> parse_duration(std::string_view text) {
  auto v = parse_with_units(text, kDurationUnits, "ms, s, m, h");
  if (!v) return std::unexpected(v.error());
  return static_cast<TimeNs>(std::llround(*v));
}

std::expected<std::uint64_t, std::string> parse_size(std::string_view text) {
  auto v = parse_with_units(text, kSizeUnits, "B, KiB, MiB, GiB, TiB");
  if (!v) return std::unexpected(v.error());
  if (*v != std::floor(*v)) {
    return std::unexpected(fmt::format("\"{}\" is not a whole number of bytes", text));
  }
  return static_cast<std::uint64_t>(*v);
}

std::expected<std::uint64_t, std::string> parse_rate(std::string_view text) {
  constexpr std::string_view kPerSec = "/s";
  if (!text.ends_with(kPerSec)) {
    return std::unexpected(fmt::format("\"{}\" is not a rate like \"256MiB/s\"", text));
  }
  return parse_size(text.substr(0, text.size() - kPerSec.size()));
}

std::expected<double, std::string> parse_percent(std::string_view text) {
  if (!text.ends_with('%')) {
    return std::unexpected(fmt::format("\"{}\" is not a percentage like \"90%\"", text));
  }
  auto split = split_number(text.substr(0, text.size() - 1));
  if (!split || !split->second.empty()) {
    return std::unexpected(fmt::format("\"{}\" is not a percentage like \"90%\"", text));
  }
  if (split->first > 100.0) return std::unexpected(fmt::format("\"{}\" is above 100%", text));
  return split->first / 100.0;
}

std::string format_size(std::uint64_t bytes) {
  for (auto it = kSizeUnits.rbegin(); it != kSizeUnits.rend(); ++it) {
    const double v = static_cast<double>(bytes) / it->factor;
    if (v >= 1.0) return trim_number(v) + std::string(it->name);
  }
  return "0B";
}

std::string format_duration(TimeNs ns) {
  if (ns == 0) return "0s";
  for (auto it = kDurationUnits.rbegin(); it != kDurationUnits.rend(); ++it) {
    const double v = static_cast<double>(ns) / it->factor;
    if (v >= 1.0) return trim_number(v) + std::string(it->name);
  }
  return fmt::format("{}ns", ns);
}

}  // namespace kvtier::policy
