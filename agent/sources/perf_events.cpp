#include "agent/sources/perf_events.hpp"

#include <fmt/format.h>
#include <linux/perf_event.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include "agent/host/host_paths.hpp"
#include "agent/host/sysfs.hpp"
#include "policy/error.hpp"

namespace kvtier::agent {

namespace fs = std::filesystem;

namespace {

fs::path pmu_dir(const HostPaths& paths, std::string_view pmu) {
  return paths.sys / "bus/event_source/devices" / pmu;
}

Result<std::uint64_t> parse_number(std::string_view s, std::string_view what) {
  std::uint64_t v = 0;
  int base = 10;
  if (s.starts_with("0x") || s.starts_with("0X")) {
    s.remove_prefix(2);
    base = 16;
  }
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), v, base);
  if (s.empty() || ec != std::errc{} || ptr != s.data() + s.size()) {
    return fail(fmt::format("{}: bad number '{}'", what, s));
  }
  return v;
}

// "event=0xcd,umask=0x1,ldlat=3" -> ordered terms; a bare term means 1.
Result<std::vector<std::pair<std::string, std::uint64_t>>> parse_terms(std::string_view text,
                                                                       std::string_view what) {
  std::vector<std::pair<std::string, std::uint64_t>> terms;
  while (!text.empty()) {
    const std::size_t comma = std::min(text.find(','), text.size());
    const std::string_view term = text.substr(0, comma);
    text.remove_prefix(std::min(comma + 1, text.size()));
    if (term.empty()) continue;
    const std::size_t eq = term.find('=');
    std::uint64_t value = 1;
    if (eq != std::string_view::npos) {
      auto v = parse_number(term.substr(eq + 1), what);
      if (!v) return std::unexpected(v.error());
      value = *v;
    }
    terms.emplace_back(std::string(term.substr(0, eq)), value);
  }
  return terms;
}

// Places `value` into the bits a format file names, e.g. "config:0-7" or
// "config1:0-15" or "config:0-7,32-35" (low bits of the value go first).
Result<void> apply_format(PmuEventSpec& spec, std::string_view format, std::uint64_t value,
                          std::string_view what) {
  const std::size_t colon = format.find(':');
  if (colon == std::string_view::npos)
    return fail(fmt::format("{}: bad format '{}'", what, format));
  const std::string_view field = format.substr(0, colon);
  std::uint64_t* target = nullptr;
  if (field == "config") target = &spec.config;
  if (field == "config1") target = &spec.config1;
  if (field == "config2") target = &spec.config2;
  if (target == nullptr) return fail(fmt::format("{}: unknown field '{}'", what, field));
  std::string_view ranges = format.substr(colon + 1);
  unsigned shift = 0;
  while (!ranges.empty()) {
    const std::size_t comma = std::min(ranges.find(','), ranges.size());
    const std::string_view r = ranges.substr(0, comma);
    ranges.remove_prefix(std::min(comma + 1, ranges.size()));
    const std::size_t dash = r.find('-');
    auto lo = parse_number(r.substr(0, dash), what);
    auto hi = dash == std::string_view::npos ? lo : parse_number(r.substr(dash + 1), what);
    if (!lo || !hi || *hi < *lo || *hi > 63) {
      return fail(fmt::format("{}: bad bit range '{}'", what, r));
    }
    const auto width = static_cast<unsigned>(*hi - *lo + 1);
    const std::uint64_t mask = width >= 64 ? ~0ULL : ((1ULL << width) - 1);
    *target |= ((value >> shift) & mask) << *lo;
    shift += width;
  }
  return {};
}

int perf_event_open(perf_event_attr* attr, int pid, int cpu, int group, unsigned long flags) {
  return static_cast<int>(syscall(SYS_perf_event_open, attr, pid, cpu, group, flags));
}

perf_event_attr make_attr(const PmuEventSpec& spec, std::uint64_t period) {
  perf_event_attr attr{};
  attr.size = sizeof(attr);
  attr.type = spec.type;
  attr.config = spec.config;
  attr.config1 = spec.config1;
  attr.config2 = spec.config2;
  attr.sample_period = period;
  attr.sample_type = PERF_SAMPLE_ADDR;
  attr.precise_ip = spec.precise_ip & 3U;
  attr.exclude_kernel = spec.exclude_kernel ? 1U : 0U;
  attr.exclude_hv = 1;
  return attr;
}

}  // namespace

std::string_view to_string(PmuEventKind k) {
  switch (k) {
    case PmuEventKind::kPebsLoadLatency:
      return "pebs-load-latency";
    case PmuEventKind::kIbsOp:
      return "ibs-op";
    case PmuEventKind::kSoftwarePageFaults:
      return "page-faults";
  }
  return "?";
}

Result<PmuEventSpec> encode_pmu_event(const HostPaths& paths, std::string_view pmu,
                                      std::string_view event_terms, std::string_view overrides) {
  const fs::path dir = pmu_dir(paths, pmu);
  auto type = read_u64(dir / "type");
  if (!type) return std::unexpected(type.error());
  PmuEventSpec spec{.type = static_cast<std::uint32_t>(*type)};
  auto base = parse_terms(event_terms, dir.string());
  auto extra = parse_terms(overrides, "overrides");
  if (!base) return std::unexpected(base.error());
  if (!extra) return std::unexpected(extra.error());
  std::map<std::string, std::uint64_t> merged;
  for (const auto& [k, v] : *base) merged[k] = v;
  for (const auto& [k, v] : *extra) merged[k] = v;
  for (const auto& [k, v] : merged) {
    const fs::path fmt_file = dir / "format" / k;
    auto format = read_text(fmt_file);
    if (!format) return std::unexpected(format.error());
    if (auto ok = apply_format(spec, *format, v, fmt_file.string()); !ok) {
      return std::unexpected(ok.error());
    }
  }
  return spec;
}

std::vector<PmuEventSpec> hardware_event_candidates(const HostPaths& paths,
                                                    std::uint32_t load_latency_cycles) {
  std::vector<PmuEventSpec> out;
  // Hybrid Intel parts name the big-core PMU cpu_core.
  for (const std::string_view pmu : {"cpu_core", "cpu"}) {
    auto terms = read_text(pmu_dir(paths, pmu) / "events/mem-loads");
    if (!terms) continue;
    auto spec = encode_pmu_event(paths, pmu, *terms, fmt::format("ldlat={}", load_latency_cycles));
    if (!spec) continue;
    spec->kind = PmuEventKind::kPebsLoadLatency;
    spec->name = fmt::format("{}/mem-loads,ldlat={}/P", pmu, load_latency_cycles);
    spec->precise_ip = 2;
    spec->exclude_kernel = true;
    out.push_back(*spec);
    break;
  }
  if (auto type = read_u64(pmu_dir(paths, "ibs_op") / "type")) {
    out.push_back(PmuEventSpec{.kind = PmuEventKind::kIbsOp,
                               .name = "ibs_op//",
                               .type = static_cast<std::uint32_t>(*type)});
  }
  return out;
}

PmuEventSpec software_page_faults_event() {
  return PmuEventSpec{.kind = PmuEventKind::kSoftwarePageFaults,
                      .name = "page-faults",
                      .type = PERF_TYPE_SOFTWARE,
                      .config = PERF_COUNT_SW_PAGE_FAULTS};
}

Result<void> try_open_event(const PmuEventSpec& spec, std::uint64_t sample_period, int cpu) {
  perf_event_attr attr = make_attr(spec, sample_period);
  attr.disabled = 1;
  const int fd = perf_event_open(&attr, -1, cpu, -1, PERF_FLAG_FD_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    return fail(fmt::format("no PMU event: perf_event_open({}) on cpu {}: {}", spec.name, cpu,
                            errno_text(err)),
                err);
  }
  close(fd);
  return {};
}

Result<PerfEventFds> open_event_per_cpu(const PmuEventSpec& spec, std::uint64_t sample_period,
                                        const std::vector<int>& cpus) {
  PerfEventFds set;
  for (const int cpu : cpus) {
    perf_event_attr attr = make_attr(spec, sample_period);
    const int fd = perf_event_open(&attr, -1, cpu, -1, PERF_FLAG_FD_CLOEXEC);
    if (fd < 0) {
      const int err = errno;
      for (const int open_fd : set.fds) close(open_fd);
      return fail(fmt::format("perf_event_open({}) on cpu {}: {}", spec.name, cpu, errno_text(err)),
                  err);
    }
    set.fds.push_back(fd);
    set.cpus.push_back(cpu);
  }
  return set;
}

Result<void> set_sample_period(const PerfEventFds& set, std::uint64_t period) {
  for (const int fd : set.fds) {
    // NOLINTNEXTLINE(cppcoreguidelines-pro-type-vararg): ioctl is variadic
    if (ioctl(fd, PERF_EVENT_IOC_PERIOD, &period) != 0) {
      const int err = errno;
      return fail(fmt::format("PERF_EVENT_IOC_PERIOD {}: {}", period, errno_text(err)), err);
    }
  }
  return {};
}

Result<std::vector<int>> online_cpus(const HostPaths& paths) {
  const fs::path p = paths.sys / "devices/system/cpu/online";
  auto text = read_text(p);
  if (!text) return std::unexpected(text.error());
  return parse_id_list(*text, p.string());
}

}  // namespace kvtier::agent
