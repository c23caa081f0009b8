#include "agent/host/numa_tiering.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <utility>

#include "agent/host/sysfs.hpp"
#include "policy/error.hpp"

namespace kvtier::agent {
namespace {

constexpr const char* kBalancing = "numa_balancing";

std::optional<std::uint64_t> value_of(const Result<std::uint64_t>& r) {
  return r ? std::optional<std::uint64_t>(*r) : std::nullopt;
}

}  // namespace

std::string KernelTiering::path_of(const std::string& file) const {
  if (file == kBalancing) return (paths_.proc / "sys/kernel/numa_balancing").string();
  return (paths_.sys / "kernel/debug/sched/numa_balancing" / file).string();
}

TieringKnobValues KernelTiering::read() const {
  return TieringKnobValues{
      .numa_balancing = value_of(read_u64(path_of(kBalancing))),
      .hot_threshold_ms = value_of(read_u64(path_of("hot_threshold_ms"))),
      .scan_period_min_ms = value_of(read_u64(path_of("scan_period_min_ms"))),
      .scan_period_max_ms = value_of(read_u64(path_of("scan_period_max_ms"))),
  };
}

Result<std::optional<std::string>> KernelTiering::set(const std::string& file,
                                                      std::uint64_t value) {
  const std::string path = path_of(file);
  auto old = read_u64(path);
  if (!old) return std::unexpected(old.error());
  if (*old == value) return std::optional<std::string>{};
  if (auto ok = write_text(path, std::to_string(value)); !ok) return std::unexpected(ok.error());
  if (std::ranges::none_of(saved_, [&](const Saved& s) { return s.file == file; })) {
    saved_.push_back(Saved{.file = file, .value = *old});
  }
  return std::optional<std::string>(fmt::format("{}: {} -> {}", path, *old, value));
}

Result<std::vector<std::string>> KernelTiering::apply(const TieringWish& wish) {
  std::vector<std::string> changed;
  auto one = [&](const std::string& file, std::uint64_t value) -> Result<void> {
    auto r = set(file, value);
    if (!r) return std::unexpected(r.error());
    if (*r) changed.push_back(std::move(**r));
    return {};
  };
  if (wish.balancing_bits != 0) {
    auto cur = read_u64(path_of(kBalancing));
    if (!cur) return std::unexpected(cur.error());
    if (auto ok = one(kBalancing, *cur | wish.balancing_bits); !ok) {
      return std::unexpected(ok.error());
    }
  }
  const std::pair<const char*, const std::optional<std::uint64_t>*> knobs[] = {
      {"hot_threshold_ms", &wish.hot_threshold_ms},
      {"scan_period_min_ms", &wish.scan_period_min_ms},
      {"scan_period_max_ms", &wish.scan_period_max_ms},
  };
  for (const auto& [file, value] : knobs) {
    if (!*value) continue;
    if (auto ok = one(file, **value); !ok) return std::unexpected(ok.error());
  }
  return changed;
}

std::vector<std::string> KernelTiering::restore() {
  std::vector<std::string> lines;
  // Newest first, so a knob written twice ends at the host's own value.
  for (auto it = saved_.rbegin(); it != saved_.rend(); ++it) {
    const std::string path = path_of(it->file);
    if (auto ok = write_text(path, std::to_string(it->value)); ok) {
      lines.push_back(fmt::format("{}: restored {}", path, it->value));
    } else {
      lines.push_back(
          fmt::format("{}: cannot restore {}: {}", path, it->value, ok.error().message));
    }
  }
  saved_.clear();
  return lines;
}

}  // namespace kvtier::agent
