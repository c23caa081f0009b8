#include "agent/host/numa_tiering.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <fstream>
#include <sstream>
#include <system_error>
#include <utility>

#include "agent/host/sysfs.hpp"
#include "policy/error.hpp"

namespace kvtier::agent {
namespace {

constexpr const char* kBalancing = "numa_balancing";
constexpr const char* kPromoteRateLimit = "numa_balancing_promote_rate_limit_MBps";
constexpr const char* kJournalHeader = "kvtier-tiering-journal 1";
// The knobs a journal may name (anything else in it is not kvtier's).
constexpr std::array<const char*, 6> kKnobs = {kBalancing,           "hot_threshold_ms",
                                               "scan_period_min_ms", "scan_period_max_ms",
                                               "scan_size_mb",       kPromoteRateLimit};

std::optional<std::uint64_t> value_of(const Result<std::uint64_t>& r) {
  return r ? std::optional<std::uint64_t>(*r) : std::nullopt;
}

}  // namespace

std::string KernelTiering::path_of(const std::string& file) const {
  if (file == kBalancing || file == kPromoteRateLimit) {
    return (paths_.proc / "sys/kernel" / file).string();
  }
  return (paths_.sys / "kernel/debug/sched/numa_balancing" / file).string();
}

TieringKnobValues KernelTiering::read() const {
  return TieringKnobValues{
      .numa_balancing = value_of(read_u64(path_of(kBalancing))),
      .hot_threshold_ms = value_of(read_u64(path_of("hot_threshold_ms"))),
      .scan_period_min_ms = value_of(read_u64(path_of("scan_period_min_ms"))),
      .scan_period_max_ms = value_of(read_u64(path_of("scan_period_max_ms"))),
      .scan_size_mb = value_of(read_u64(path_of("scan_size_mb"))),
      .promote_rate_limit_mbps = value_of(read_u64(path_of(kPromoteRateLimit))),
  };
}

Result<std::uint64_t> KernelTiering::hint_faults() const {
  const std::filesystem::path path = paths_.proc / "vmstat";
  auto text = read_text(path);
  if (!text) return std::unexpected(text.error());
  std::istringstream lines(*text);
  std::string name;
  std::uint64_t value = 0;
  while (lines >> name >> value) {
    if (name == "numa_hint_faults") return value;
  }
  return fail(fmt::format("{}: no numa_hint_faults line (CONFIG_NUMA_BALANCING)", path.string()));
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
    if (const std::string err = write_journal(); !err.empty()) {
      return std::optional<std::string>(fmt::format(
          "{}: {} -> {} ({}; a kvtierd killed now leaves it changed)", path, *old, value, err));
    }
  }
  return std::optional<std::string>(fmt::format("{}: {} -> {}", path, *old, value));
}

std::vector<std::string> KernelTiering::recover() {
  std::vector<std::string> lines;
  if (recovered_ || journal_.empty()) return lines;
  recovered_ = true;
  std::ifstream in(journal_);
  if (!in) return lines;  // the usual case: the last kvtierd restored everything
  std::string header;
  std::getline(in, header);
  if (header != kJournalHeader) {
    lines.push_back(fmt::format("{}: not a kvtier tiering journal (first line '{}'): ignored",
                                journal_.string(), header.substr(0, 64)));
    return lines;
  }
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream words(line);
    std::string file;
    std::uint64_t value = 0;
    if (!(words >> file >> value) ||
        std::ranges::none_of(kKnobs, [&](const char* k) { return file == k; })) {
      lines.push_back(fmt::format("{}: line '{}' ignored (want: KNOB VALUE)", journal_.string(),
                                  line.substr(0, 64)));
      continue;
    }
    if (std::ranges::any_of(saved_, [&](const Saved& s) { return s.file == file; })) continue;
    saved_.push_back(Saved{.file = file, .value = value});
    lines.push_back(fmt::format(
        "{}: a kvtierd that did not stop cleanly left it changed; the host's value {} (from {}) "
        "is restored at stop",
        path_of(file), value, journal_.string()));
  }
  return lines;
}

std::string KernelTiering::write_journal() const {
  if (journal_.empty()) return {};
  std::string text = std::string(kJournalHeader) + '\n';
  for (const auto& s : saved_) text += fmt::format("{} {}\n", s.file, s.value);
  auto ok = replace_file(journal_, text);
  return ok ? std::string() : "cannot write the journal: " + ok.error().message;
}

Result<std::vector<std::string>> KernelTiering::apply(const TieringWish& wish) {
  std::vector<std::string> changed = recover();
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
      {"scan_size_mb", &wish.scan_size_mb},
      {kPromoteRateLimit, &wish.promote_rate_limit_mbps},
  };
  for (const auto& [file, value] : knobs) {
    if (!*value) continue;
    if (auto ok = one(file, **value); !ok) return std::unexpected(ok.error());
  }
  return changed;
}

std::vector<std::string> KernelTiering::restore() {
  std::vector<std::string> lines;
  std::vector<Saved> failed;
  for (const auto& saved : saved_) {
    const std::string path = path_of(saved.file);
    if (auto ok = write_text(path, std::to_string(saved.value)); ok) {
      lines.push_back(fmt::format("{}: restored {}", path, saved.value));
    } else {
      lines.push_back(
          fmt::format("{}: cannot restore {}: {}", path, saved.value, ok.error().message));
      failed.push_back(saved);
    }
  }
  // What could not be put back stays in the journal for the next kvtierd.
  saved_ = std::move(failed);
  if (!journal_.empty()) {
    std::error_code ec;
    if (saved_.empty()) {
      std::filesystem::remove(journal_, ec);
    } else if (const std::string err = write_journal(); !err.empty()) {
      lines.push_back(err);
    }
  }
  return lines;
}

}  // namespace kvtier::agent
