#include "bench/loadgen/procstat.hpp"

#include <algorithm>
#include <array>
#include <charconv>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>
#include "bench/probe/proc_text.hpp"

namespace kvtier::bench::loadgen {
namespace {

// The NUMA, migration and fault counters that can cost a request time while pages move.
constexpr std::array<std::string_view, 15> kVmKeys = {
    "numa_hint_faults",  "numa_hint_faults_local", "numa_pages_migrated",   "numa_pte_updates",
    "pgmigrate_success", "pgmigrate_fail",         "pgpromote_success",     "pgdemote_kswapd",
    "pgdemote_direct",   "pgdemote_khugepaged",    "pgdemote_proactive",    "pgfault",
    "pgmajfault",        "nr_tlb_remote_flush",    "nr_tlb_local_flush_all"};

std::optional<std::uint64_t> number(std::string_view s) {
  std::uint64_t v = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc{} || end == s.data()) {
    return std::nullopt;
  }
  return v;
}

std::vector<std::string_view> words(std::string_view line) {
  std::vector<std::string_view> out;
  std::size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && (line[i] == ' ' || line[i] == '\t')) {
      ++i;
    }
    const std::size_t j = line.find_first_of(" \t", i);
    const std::size_t e = j == std::string_view::npos ? line.size() : j;
    if (e > i) {
      out.push_back(line.substr(i, e - i));
    }
    i = e;
  }
  return out;
}

std::string slurp(const std::string& path) {
  std::ifstream f(path);
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

// All threads of a process, summed; false if the process is gone.
bool process_times(int pid, TaskTimes& out) {
  const std::filesystem::path dir =
      (pid > 0 ? "/proc/" + std::to_string(pid) : std::string("/proc/self")) + "/task";
  std::error_code ec;
  std::filesystem::directory_iterator it(dir, ec);
  if (ec) {
    return false;
  }
  out = {};
  // A thread may exit while the directory is read: the error form of increment, no throw.
  for (; !ec && it != std::filesystem::directory_iterator(); it.increment(ec)) {
    if (const auto t = parse_schedstat(slurp((it->path() / "schedstat").string()))) {
      out.cpu_ns += t->cpu_ns;
      out.delay_ns += t->delay_ns;
      out.slices += t->slices;
    }
  }
  return true;
}

double ms(std::uint64_t a, std::uint64_t b) {
  return b >= a ? static_cast<double>(b - a) / 1e6 : 0.0;
}

}  // namespace

std::optional<TaskTimes> parse_schedstat(std::string_view text) {
  const auto w = words(text.substr(0, text.find('\n')));
  if (w.size() < 3) {
    return std::nullopt;
  }
  const auto c = number(w[0]), d = number(w[1]), s = number(w[2]);
  if (!c || !d || !s) {
    return std::nullopt;
  }
  return TaskTimes{.cpu_ns = *c, .delay_ns = *d, .slices = *s};
}

std::optional<CpuTicks> parse_proc_stat(std::string_view text) {
  const auto w = words(text.substr(0, text.find('\n')));
  if (w.size() < 8 || w[0] != "cpu") {
    return std::nullopt;
  }
  std::array<std::uint64_t, 7> v{};
  for (std::size_t i = 0; i < v.size(); ++i) {
    const auto n = number(w[i + 1]);
    if (!n) {
      return std::nullopt;
    }
    v[i] = *n;
  }
  return CpuTicks{.user = v[0],
                  .nice = v[1],
                  .system = v[2],
                  .idle = v[3],
                  .iowait = v[4],
                  .irq = v[5],
                  .softirq = v[6]};
}

std::map<std::string, std::uint64_t> parse_vmstat(std::string_view text) {
  // The probe's parser, by prefix; a key is also the prefix of longer names
  // (nr_tlb_remote_flush_received), so only the exact keys are kept.
  static const std::vector<std::string> prefixes(kVmKeys.begin(), kVmKeys.end());
  auto out = bench::parse_vmstat(text, prefixes);
  std::erase_if(
      out, [](const auto& kv) { return std::ranges::find(kVmKeys, kv.first) == kVmKeys.end(); });
  return out;
}

ProcSnapshot take_snapshot(int pid, int watch_pid) {
  ProcSnapshot s;
  s.server_ok = pid > 0 && process_times(pid, s.server);
  s.watch_ok = watch_pid > 0 && process_times(watch_pid, s.watch);
  process_times(0, s.self);
  if (const auto c = parse_proc_stat(slurp("/proc/stat"))) {
    s.cpu = *c;
  }
  s.vm = parse_vmstat(slurp("/proc/vmstat"));
  return s;
}

nlohmann::json window_json(const ProcSnapshot& a, const ProcSnapshot& b, long clk_tck) {
  const double tick_ms = 1000.0 / static_cast<double>(clk_tck > 0 ? clk_tck : 100);
  const auto ticks = [&](std::uint64_t x, std::uint64_t y) {
    return y >= x ? static_cast<double>(y - x) * tick_ms : 0.0;
  };
  nlohmann::json j = {{"self_cpu_ms", ms(a.self.cpu_ns, b.self.cpu_ns)},
                      {"busy_ms", ticks(a.cpu.busy(), b.cpu.busy())},
                      {"idle_ms", ticks(a.cpu.idle + a.cpu.iowait, b.cpu.idle + b.cpu.iowait)},
                      {"system_ms", ticks(a.cpu.system, b.cpu.system)},
                      {"softirq_ms", ticks(a.cpu.softirq + a.cpu.irq, b.cpu.softirq + b.cpu.irq)}};
  if (a.server_ok && b.server_ok) {
    j["server_cpu_ms"] = ms(a.server.cpu_ns, b.server.cpu_ns);
    j["server_delay_ms"] = ms(a.server.delay_ns, b.server.delay_ns);
  }
  if (a.watch_ok && b.watch_ok) {
    j["watch_cpu_ms"] = ms(a.watch.cpu_ns, b.watch.cpu_ns);
    j["watch_delay_ms"] = ms(a.watch.delay_ns, b.watch.delay_ns);
  }
  nlohmann::json vm = nlohmann::json::object();
  for (const auto& [k, v] : b.vm) {
    const auto it = a.vm.find(k);
    if (it != a.vm.end() && v >= it->second) {
      vm[k] = v - it->second;
    }
  }
  j["vm"] = vm;
  return j;
}

}  // namespace kvtier::bench::loadgen
