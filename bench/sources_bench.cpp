// kvtier_bench_sources: what watching a busy process costs, per hotness
// source. A child process keeps a TARGET MiB buffer busy; each source watches
// it for SECONDS while the agent side drains it once a second, as the daemon
// does. Printed per source, as a share of one CPU core: the kernel's time in
// the BPF programs (run_time_ns from bpf_prog_info, with BPF run-time stats
// on), the kdamond thread's time (DAMON), and the agent's own CPU time
// (getrusage); plus events and samples per second, and the workload's speed
// relative to a baseline run without any source, in the same process.
//
// Usage: kvtier_bench_sources [--target-mib N] [--seconds S] [--workload steady|churn]
//                             [--sources faults,pmu-soft,pmu-soft-adaptive,damon]
// steady: one write per page over the whole buffer, again and again (no
// faults once resident). churn: the same, plus 64 MiB of the buffer dropped
// (MADV_DONTNEED) and faulted back in on every pass.

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "agent/host/clock.hpp"
#include "agent/host/sysfs.hpp"
#include "agent/sources/bpf_stats.hpp"
#include "agent/sources/damon_source.hpp"
#include "agent/sources/fault_sampler.hpp"
#include "agent/sources/pmu_sampler.hpp"

namespace kvtier::bench {
namespace {

using Clock = std::chrono::steady_clock;
constexpr std::uint64_t kMiB = 1ULL << 20;

struct Args {
  std::uint64_t target_mib = 4096;
  double seconds = 10;
  std::string workload = "churn";
  std::vector<std::string> sources = {"faults", "pmu-soft", "pmu-soft-adaptive", "damon"};
};

TimeNs now_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<TimeNs>(ts.tv_sec) * 1'000'000'000ULL + static_cast<TimeNs>(ts.tv_nsec);
}

// utime + stime of a thread from /proc/PID/stat, in seconds.
double cpu_seconds_of(Pid pid) {
  auto text = agent::read_text(fmt::format("/proc/{}/stat", pid));
  if (!text) return 0;
  const auto close = text->rfind(')');
  if (close == std::string::npos) return 0;
  std::istringstream in(text->substr(close + 2));
  std::string field;
  std::uint64_t utime = 0;
  std::uint64_t stime = 0;
  for (int i = 3; i <= 15 && in >> field; ++i) {
    if (i == 14) utime = std::strtoull(field.c_str(), nullptr, 10);
    if (i == 15) stime = std::strtoull(field.c_str(), nullptr, 10);
  }
  return static_cast<double>(utime + stime) / static_cast<double>(sysconf(_SC_CLK_TCK));
}

// The busy process: counts its passes over the buffer in shared memory.
struct Workload {
  pid_t pid = -1;
  std::atomic<std::uint64_t>* pages_written = nullptr;

  static Workload start(const Args& a) {
    Workload w;
    void* shared = mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (shared == MAP_FAILED) return w;
    w.pages_written = new (shared) std::atomic<std::uint64_t>(0);
    const std::uint64_t bytes = a.target_mib * kMiB;
    const bool churn = a.workload == "churn";
    w.pid = fork();
    if (w.pid == 0) {
      auto* buf = static_cast<char*>(
          mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
      if (buf == MAP_FAILED) _exit(1);
      madvise(buf, bytes, MADV_NOHUGEPAGE);
      std::uint64_t window = 0;
      for (;;) {
        if (churn) {
          const std::uint64_t off = (window * 64 * kMiB) % bytes;
          madvise(buf + off, std::min<std::uint64_t>(64 * kMiB, bytes - off), MADV_DONTNEED);
          ++window;
        }
        for (std::uint64_t off = 0; off < bytes; off += 4096) {
          volatile char* p = buf + off;
          *p = static_cast<char>(*p + 1);
        }
        w.pages_written->fetch_add(bytes / 4096, std::memory_order_relaxed);
      }
    }
    return w;
  }
  void stop() {
    if (pid > 0) {
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
    }
    pid = -1;
  }
};

struct Figures {
  std::string source;
  std::string note;
  double seconds = 0;
  double bpf_s = 0;
  double kdamond_s = 0;
  double agent_s = 0;
  std::uint64_t events = 0;
  std::uint64_t samples = 0;
  double pages_per_s = 0;
};

std::unique_ptr<agent::HotnessSource> make(const std::string& name, std::string& note) {
  const agent::HostPaths paths;
  if (name == "faults") return std::make_unique<agent::FaultSampler>(paths, agent::FaultOptions{});
  if (name == "pmu-soft") {
    note = "period 1";
    return std::make_unique<agent::PmuSampler>(
        paths,
        agent::PmuOptions{
            .events = agent::PmuEventChoice::kSoftware, .sample_period = 1, .adaptive = false});
  }
  if (name == "pmu-soft-adaptive") {
    note = "budget 20000/s";
    return std::make_unique<agent::PmuSampler>(
        paths, agent::PmuOptions{.events = agent::PmuEventChoice::kSoftware,
                                 .sample_period = 1,
                                 .adaptive = true,
                                 .max_samples_per_sec = 20000});
  }
  if (name == "damon") return std::make_unique<agent::DamonSource>(paths, agent::DamonOptions{});
  return nullptr;
}

std::vector<int> prog_fds(agent::HotnessSource& s) {
  if (auto* p = dynamic_cast<agent::PmuSampler*>(&s)) return p->program_fds();
  if (auto* f = dynamic_cast<agent::FaultSampler*>(&s)) return f->program_fds();
  if (auto* d = dynamic_cast<agent::DamonSource*>(&s)) return d->program_fds();
  return {};
}

// Runs the workload for `seconds` with `src` watching it (or nothing).
Result<Figures> measure(const Args& a, const std::string& name) {
  Figures f{.source = name.empty() ? "baseline" : name};
  std::unique_ptr<agent::HotnessSource> src;
  if (!name.empty()) {
    src = make(name, f.note);
    if (!src) return fail(fmt::format("unknown source '{}'", name));
    const auto avail = src->probe();
    if (!avail.ok) return fail(fmt::format("{}: {}", name, avail.why));
    if (auto ok = src->start(); !ok) return std::unexpected(ok.error());
  }
  Workload w = Workload::start(a);
  if (w.pid <= 0) return fail("cannot start the workload");
  // Let it map and touch its buffer before the clock starts.
  while (w.pages_written->load() < a.target_mib * kMiB / 4096) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  const Pid target = w.pid;
  if (src) {
    if (auto ok = src->set_targets(std::span<const Pid>(&target, 1)); !ok) {
      w.stop();
      return std::unexpected(ok.error());
    }
  }
  const auto fds = src ? prog_fds(*src) : std::vector<int>{};
  auto* damon = dynamic_cast<agent::DamonSource*>(src.get());
  const auto bpf0 = agent::sum_prog_stats(fds);
  const double kd0 = damon != nullptr ? cpu_seconds_of(damon->kdamond_pid()) : 0;
  const double agent0 = agent::process_cpu_seconds();
  const std::uint64_t pages0 = w.pages_written->load();
  const auto t0 = Clock::now();
  const auto end = t0 + std::chrono::duration<double>(a.seconds);
  while (Clock::now() < end) {
    std::this_thread::sleep_for(std::chrono::seconds(1));
    if (src) {
      agent::SourceBatch b;
      if (auto ok = src->collect(now_ns(), b); !ok) {
        w.stop();
        return std::unexpected(ok.error());
      }
      f.samples += b.samples.size() + b.regions.size();
    }
  }
  f.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  f.agent_s = agent::process_cpu_seconds() - agent0;
  f.pages_per_s = static_cast<double>(w.pages_written->load() - pages0) / f.seconds;
  const auto bpf1 = agent::sum_prog_stats(fds);
  if (bpf0 && bpf1) {
    f.bpf_s = static_cast<double>(bpf1->run_time_ns - bpf0->run_time_ns) / 1e9;
    f.events = bpf1->run_cnt - bpf0->run_cnt;
  }
  if (damon != nullptr) f.kdamond_s = cpu_seconds_of(damon->kdamond_pid()) - kd0;
  w.stop();
  if (src) src->stop();
  return f;
}

bool parse(int argc, char** argv, Args& a) {
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    const std::string v = argv[i + 1];
    if (k == "--target-mib") {
      a.target_mib = std::strtoull(v.c_str(), nullptr, 10);
    } else if (k == "--seconds") {
      a.seconds = std::strtod(v.c_str(), nullptr);
    } else if (k == "--workload" && (v == "steady" || v == "churn")) {
      a.workload = v;
    } else if (k == "--sources") {
      a.sources.clear();
      std::stringstream ss(v);
      for (std::string s; std::getline(ss, s, ',');) a.sources.push_back(s);
    } else {
      return false;
    }
  }
  return argc % 2 == 1 && a.target_mib >= 64 && a.seconds > 0;
}

int run(int argc, char** argv) {
  Args a;
  if (!parse(argc, argv, a)) {
    std::fprintf(stderr,
                 "usage: kvtier_bench_sources [--target-mib N>=64] [--seconds S] "
                 "[--workload steady|churn] [--sources a,b,...]\n");
    return 2;
  }
  spdlog::set_level(spdlog::level::warn);
  agent::BpfRunTimeStats stats;
  if (auto ok = stats.enable(); !ok) {
    std::fprintf(stderr, "kvtier_bench_sources: %s\n", ok.error().message.c_str());
    return 1;
  }
  std::printf(
      "kvtier_bench_sources: %s workload, %llu MiB target, %.0f s per source, "
      "drained once a second\n",
      a.workload.c_str(), static_cast<unsigned long long>(a.target_mib), a.seconds);
  auto base = measure(a, "");
  if (!base) {
    std::fprintf(stderr, "baseline: %s\n", base.error().message.c_str());
    return 1;
  }
  std::printf("%-18s %-15s %11s %11s %9s %10s %10s %10s %10s %9s\n", "source", "", "events/s",
              "samples/s", "ns/event", "bpf %core", "kdamond %", "agent %", "total %", "workload");
  std::printf("%-18s %-15s %11s %11s %9s %10s %10s %10s %10s %9.3f\n", "baseline", "", "-", "-",
              "-", "-", "-", "-", "-", 1.0);
  for (const auto& name : a.sources) {
    auto f = measure(a, name);
    if (!f) {
      std::printf("%-18s skipped: %s\n", name.c_str(), f.error().message.c_str());
      continue;
    }
    const double pct = 100.0 / f->seconds;
    std::printf("%-18s %-15s %11.0f %11.0f %9.0f %10.3f %10.3f %10.3f %10.3f %9.3f\n",
                f->source.c_str(), f->note.c_str(), static_cast<double>(f->events) / f->seconds,
                static_cast<double>(f->samples) / f->seconds,
                f->events > 0 ? f->bpf_s * 1e9 / static_cast<double>(f->events) : 0.0,
                f->bpf_s * pct, f->kdamond_s * pct, f->agent_s * pct,
                (f->bpf_s + f->kdamond_s + f->agent_s) * pct, f->pages_per_s / base->pages_per_s);
  }
  std::printf(
      "%%core: share of one CPU core over the run; workload: pages written per second "
      "relative to the baseline\n");
  return 0;
}

}  // namespace
}  // namespace kvtier::bench

int main(int argc, char** argv) {
  return kvtier::bench::run(argc, argv);
}
