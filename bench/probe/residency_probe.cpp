// kvtier_residency_probe: samples, once a second, which NUMA node holds each page of one
// address range of a process (move_pages(2) in query mode: exact, moves nothing), plus the
// system's migration counters, free memory per node and the CPU time of the threads that move
// pages. The benchmark runs it beside kvsim in the guest.
//
//   kvtier_residency_probe PID START END [--interval S] [--duration S] [--map-every N]
//                          [--truth FILE] [--cpu REGEX]
//
// Output, JSON lines on stdout:
//   {"event":"sample","i","t_ns","t_s","pages","page_bytes","bytes_by_node":{"0":..},
//    "status_pages":{"-2":..} (pages the kernel could not place, by -errno),"query_ms",
//    "free_kib_by_node":{..},"vmstat":{..},"cpu_ticks":{"comm":utime+stime},"sys_ticks":{"comm":stime},
//    "minflt":{"comm":minor faults},"clk_tck",
//    "runs":[[node,pages],...] (on map samples: the node of every page, run-length encoded)}
//   {"event":"truth","i","t_ns","csv"} on map samples with --truth: the probe sends SIGUSR1 to
//    PID right after the map (kvsim then writes its ground truth) and relays the file.
//   {"event":"end","reason":"duration"|"target exited","samples"}
// With --duration the last sample is always a map sample. Exit status: 0, 1 error, 2 usage.

#include <fmt/format.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cerrno>
#include <csignal>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "bench/main_guard.hpp"
#include "bench/probe/proc_text.hpp"
#include "policy/types.hpp"

namespace {

namespace kb = kvtier::bench;
namespace fs = std::filesystem;
using Json = nlohmann::ordered_json;
using kvtier::TimeNs;

constexpr std::uint64_t kPage = 4096;

TimeNs mono_now() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<TimeNs>(ts.tv_sec) * 1'000'000'000ULL + static_cast<TimeNs>(ts.tv_nsec);
}

void sleep_until(TimeNs t) {
  const TimeNs now = mono_now();
  if (t <= now) return;
  const TimeNs ns = t - now;
  timespec ts{.tv_sec = static_cast<time_t>(ns / 1'000'000'000ULL),
              .tv_nsec = static_cast<long>(ns % 1'000'000'000ULL)};
  nanosleep(&ts, nullptr);
}

std::string slurp(const fs::path& p) {
  std::ifstream f(p);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

struct Options {
  int pid = 0;
  std::string start;
  std::string end;
  double interval_s = 1.0;
  double duration_s = 0;
  std::uint32_t map_every = 0;
  std::string truth;
  std::string cpu = "^(kswapd|kdamond|kcompactd|kvtier|kvsim)";
};

std::uint64_t parse_addr(const std::string& s, const char* what) {
  std::size_t used = 0;
  std::uint64_t v = 0;
  try {
    v = std::stoull(s, &used, 0);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != s.size() || s.empty()) {
    throw std::runtime_error(fmt::format("{} '{}': expected a decimal or 0x address", what, s));
  }
  return v;
}

// Node of every page of [start, end) in `pid`; false once the process is gone.
bool query(int pid, std::uint64_t start, std::uint64_t end, std::vector<int>& status) {
  constexpr std::size_t kBatch = 16384;
  const std::size_t n = (end - start) / kPage;
  std::vector<void*> pages(std::min(n, kBatch));
  status.assign(n, -1);
  for (std::size_t i = 0; i < n; i += kBatch) {
    const std::size_t m = std::min(kBatch, n - i);
    for (std::size_t j = 0; j < m; ++j) {
      // Addresses in the target's address space, never dereferenced here.
      pages[j] =
          reinterpret_cast<void*>(start + (i + j) * kPage);  // NOLINT(performance-no-int-to-ptr)
    }
    if (syscall(SYS_move_pages, pid, m, pages.data(), nullptr, status.data() + i, 0) != 0) {
      const int err = errno;
      if (err == ESRCH) return false;
      std::fill_n(status.begin() + static_cast<std::ptrdiff_t>(i), m, -err);
    }
  }
  return true;
}

Json free_by_node() {
  Json out = Json::object();
  std::error_code ec;
  for (const auto& e : fs::directory_iterator("/sys/devices/system/node", ec)) {
    const std::string name = e.path().filename().string();
    if (!name.starts_with("node") || name.size() == 4) continue;
    std::istringstream in(slurp(e.path() / "meminfo"));
    std::string line;
    while (std::getline(in, line)) {
      // "Node 0 MemFree:  469652 kB"
      std::istringstream w(line);
      std::string node_word;
      std::string id;
      std::string key;
      std::uint64_t kib = 0;
      if (w >> node_word >> id >> key >> kib && key == "MemFree:") out[id] = kib;
    }
  }
  return out;
}

// CPU ticks (user+system), system ticks and minor faults of every process whose comm matches,
// summed by comm: {"cpu_ticks": {..}, "sys_ticks": {..}, "minflt": {..}}.
Json cpu_counters(const std::regex& re) {
  Json out = {
      {"cpu_ticks", Json::object()}, {"sys_ticks", Json::object()}, {"minflt", Json::object()}};
  const auto add = [&](const char* key, const std::string& comm, std::uint64_t v) {
    Json& m = out[key];
    m[comm] = m.contains(comm) ? m[comm].get<std::uint64_t>() + v : v;
  };
  std::error_code ec;
  for (const auto& e : fs::directory_iterator("/proc", ec)) {
    const std::string name = e.path().filename().string();
    if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
    auto cpu = kb::parse_proc_stat(slurp(e.path() / "stat"));
    if (!cpu || !std::regex_search(cpu->comm, re)) continue;
    add("cpu_ticks", cpu->comm, cpu->utime_ticks + cpu->stime_ticks);
    add("sys_ticks", cpu->comm, cpu->stime_ticks);
    add("minflt", cpu->comm, cpu->minflt);
  }
  return out;
}

struct FileId {
  ino_t ino = 0;
  timespec mtime{};
  bool operator==(const FileId& o) const {
    return ino == o.ino && mtime.tv_sec == o.mtime.tv_sec && mtime.tv_nsec == o.mtime.tv_nsec;
  }
};

FileId file_id(const std::string& path) {
  struct stat st {};
  if (stat(path.c_str(), &st) != 0) return {};
  return FileId{.ino = st.st_ino, .mtime = st.st_mtim};
}

// Asks the target for its ground truth and relays the file once it has been replaced.
void relay_truth(const Options& o, std::uint64_t i, TimeNs t) {
  const FileId before = file_id(o.truth);
  if (kill(o.pid, SIGUSR1) != 0) {
    std::cerr << fmt::format("kvtier_residency_probe: kill({}, SIGUSR1): {}\n", o.pid,
                             kvtier::errno_text(errno));
    return;
  }
  const TimeNs deadline = mono_now() + 10'000'000'000ULL;
  while (file_id(o.truth) == before) {
    if (mono_now() > deadline) {
      std::cerr << fmt::format(
          "kvtier_residency_probe: {}: not rewritten within 10 s of SIGUSR1 (is PID {} kvsim "
          "with --truth {}?)\n",
          o.truth, o.pid, o.truth);
      return;
    }
    sleep_until(mono_now() + 5'000'000ULL);
  }
  std::cout << Json{{"event", "truth"}, {"i", i}, {"t_ns", t}, {"csv", slurp(o.truth)}}.dump()
            << '\n'
            << std::flush;
}

int run(const Options& o) {
  const std::uint64_t start = parse_addr(o.start, "START") & ~(kPage - 1);
  const std::uint64_t end = parse_addr(o.end, "END");
  if (end <= start) throw std::runtime_error("END must be above START");
  const std::regex cpu_re(o.cpu);
  const std::vector<std::string> vm_keys{"pgmigrate_", "pgdemote_", "pgpromote_",   "numa_",
                                         "pgsteal_",   "pgscan_",   "thp_migration"};
  const long clk_tck = sysconf(_SC_CLK_TCK);
  const TimeNs t0 = mono_now();
  const auto interval = static_cast<TimeNs>(o.interval_s * 1e9);
  const TimeNs stop = o.duration_s > 0 ? t0 + static_cast<TimeNs>(o.duration_s * 1e9) : 0;
  std::vector<int> status;
  std::uint64_t i = 0;
  for (;; ++i) {
    sleep_until(std::min(t0 + i * interval, stop != 0 ? stop : ~TimeNs{0}));
    const TimeNs t = mono_now();
    const bool last = stop != 0 && t >= stop;
    const bool map = last || (o.map_every > 0 && i > 0 && i % o.map_every == 0);
    if (!query(o.pid, start, end, status)) {
      std::cout << Json{{"event", "end"}, {"reason", "target exited"}, {"samples", i}}.dump()
                << '\n';
      return 0;
    }
    const TimeNs q = mono_now() - t;
    const kb::NodeSummary s = kb::summarize_nodes(status, map);
    Json by_node = Json::object();
    Json other = Json::object();
    for (const auto& [st, pages] : s.pages) {
      if (st >= 0) {
        by_node[std::to_string(st)] = pages * kPage;
      } else {
        other[std::to_string(st)] = pages;
      }
    }
    Json j{{"event", "sample"},
           {"i", i},
           {"t_ns", t},
           {"t_s", static_cast<double>(t - t0) / 1e9},
           {"pages", status.size()},
           {"page_bytes", kPage},
           {"bytes_by_node", by_node},
           {"status_pages", other},
           {"query_ms", static_cast<double>(q) / 1e6},
           {"free_kib_by_node", free_by_node()},
           {"vmstat", kb::parse_vmstat(slurp("/proc/vmstat"), vm_keys)},
           {"clk_tck", clk_tck}};
    j.update(cpu_counters(cpu_re));
    if (map) {
      Json runs = Json::array();
      for (const auto& [st, n] : s.runs) runs.push_back({st, n});
      j["start"] = start;
      j["runs"] = std::move(runs);
    }
    std::cout << j.dump() << '\n' << std::flush;
    if (map && !o.truth.empty()) relay_truth(o, i, t);
    if (last) break;
  }
  std::cout << Json{{"event", "end"}, {"reason", "duration"}, {"samples", i + 1}}.dump() << '\n';
  return 0;
}

int parse_and_run(int argc, char** argv) {
  CLI::App app{"kvtier_residency_probe: per-node residency of a process's address range"};
  Options o;
  app.add_option("pid", o.pid, "Target process")->required()->check(CLI::PositiveNumber);
  app.add_option("start", o.start, "First address of the range (decimal or 0x)")->required();
  app.add_option("end", o.end, "End of the range (exclusive)")->required();
  app.add_option("--interval", o.interval_s, "Seconds between samples")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--duration", o.duration_s, "Stop after S seconds (0: when the target exits)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_option("--map-every", o.map_every,
                 "Every N samples, print the node of every page (0: only the last)")
      ->capture_default_str();
  app.add_option("--truth", o.truth,
                 "kvsim's --truth file (.csv): on map samples, SIGUSR1 the target and relay it");
  app.add_option("--cpu", o.cpu, "Report CPU ticks of processes whose comm matches")
      ->capture_default_str();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? 0 : 2;
  }
  return run(o);
}

}  // namespace

int main(int argc, char** argv) {
  return kvtier::bench::guarded_main("kvtier_residency_probe", 1,
                                     [&] { return parse_and_run(argc, argv); });
}
