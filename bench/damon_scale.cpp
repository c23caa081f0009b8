// kvtier_damon_scale: what DAMON costs against the size it tracks (issue 33, item 3).
//
// For each size, a child process maps SIZE GiB of anonymous memory with
// MAP_NORESERVE (a virtual range far larger than the guest's RAM is fine: DAMON
// vaddr monitors virtual ranges), touches --resident-mib of it in 64 KiB blocks
// spread evenly over the mapping (the KV shape: blocks of many sequences), and
// keeps every --hot-every'th block hot (one word a page, again and again, with
// a TLB flush after each pass: under QEMU TCG DAMON sees no access without it);
// with --hot clustered the hot blocks sit side by side in the middle instead.
// kvtierd's own DAMON source watches the mapping as kvtierd would (the shipped
// defaults: "auto" intervals and region bounds from policy::Config{}), and every
// step (--step-s, kvtierd's interval) the regions are drained and added to two
// heat tables, one per granularity, as Ingest::add_to_heat does.
//
// Printed per size: the sizing kvtierd chose, the region count DAMON reported
// (the last aggregation, and the lowest and highest seen), the hot regions'
// bytes, the kdamond thread's CPU (utime + stime from /proc/PID/stat) as a share
// of one core, and kvtierd's DAMON-side CPU (setting the kdamond up over sysfs
// once; per step the ring buffer drain and the heat tables' update), then the
// growth exponent of each between consecutive sizes and first to last.
//
// Usage: kvtier_damon_scale [--sizes-gib 1,4,16,64] [--seconds S] [--warmup-s S]
//                           [--step-s S] [--resident-mib N] [--hot-every K]
//                           [--hot spread|clustered] [--min-regions N --max-regions N]
// --min-regions/--max-regions: DAMON's region bounds as [sources] damon_min_regions and
// damon_max_regions set them (default "auto").

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <optional>
#include <span>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "agent/host/clock.hpp"
#include "agent/host/host_paths.hpp"
#include "agent/host/procfs.hpp"
#include "agent/host/sysfs.hpp"
#include "agent/sources/damon_source.hpp"
#include "agent/sources/hotness_source.hpp"
#include "agent/sources/source_registry.hpp"
#include "bench/main_guard.hpp"
#include "policy/config.hpp"
#include "policy/error.hpp"
#include "policy/heat.hpp"
#include "policy/types.hpp"

namespace kvtier::bench {
namespace {

constexpr std::uint64_t kMiB = 1ULL << 20;
constexpr std::uint64_t kGiB = 1ULL << 30;
constexpr std::uint64_t kBlock = 64ULL << 10;  // a KV block
constexpr std::uint64_t kPage = 4096;

struct Args {
  std::vector<std::uint64_t> sizes_gib = {1, 4, 16, 64};
  double seconds = 40;
  double warmup_s = 10;
  double step_s = 5;
  std::uint64_t resident_mib = 64;
  std::uint64_t hot_every = 16;
  bool clustered = false;  // the hot blocks side by side (one hot sequence), else spread
  // [sources] damon_min_regions / damon_max_regions; unset: "auto", the shipped default.
  std::optional<std::uint64_t> min_regions;
  std::optional<std::uint64_t> max_regions;
};

// What the child tells the parent, in shared memory.
struct Shared {
  std::atomic<std::uint64_t> base{0};  // the mapping's address once every block was touched
  std::atomic<std::uint64_t> passes{0};
};

struct Workload {
  pid_t pid = -1;
  Shared* shared = nullptr;
  AddrRange range;
};

// The child: never returns.
[[noreturn]] void run_child(const Args& a, std::uint64_t bytes, Shared* sh) {
  void* m = mmap(nullptr, bytes, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (m == MAP_FAILED) {
    std::perror("kvtier_damon_scale: mmap");
    _exit(1);
  }
  auto* buf = static_cast<char*>(m);
  madvise(buf, bytes, MADV_NOHUGEPAGE);
  const std::uint64_t blocks = std::max<std::uint64_t>(a.resident_mib * kMiB / kBlock, 1);
  const std::uint64_t stride = std::max<std::uint64_t>(bytes / blocks / kBlock, 1) * kBlock;
  std::vector<char*> hot;
  // Clustered: the hot blocks side by side in the middle of the mapping.
  char* cluster = buf + (bytes / 2 / kBlock) * kBlock;
  for (std::uint64_t b = 0; b < blocks && b * stride + kBlock <= bytes; ++b) {
    const bool is_hot = b % a.hot_every == 0;
    char* blk = is_hot && a.clustered ? cluster + (b / a.hot_every) * kBlock : buf + b * stride;
    for (std::uint64_t p = 0; p < kBlock; p += kPage) blk[p] = 1;
    if (is_hot) hot.push_back(blk);
  }
  constexpr std::size_t kScratch = 64 * kPage;  // dropping it flushes the whole TLB
  auto* scratch = static_cast<char*>(
      mmap(nullptr, kScratch, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  if (scratch == MAP_FAILED) _exit(1);
  sh->base.store(reinterpret_cast<std::uint64_t>(buf));
  for (;;) {
    for (char* blk : hot) {
      for (std::uint64_t p = 0; p < kBlock; p += kPage) {
        volatile char* c = blk + p;
        *c = static_cast<char>(*c + 1);
      }
    }
    std::memset(scratch, 1, kScratch);
    madvise(scratch, kScratch, MADV_DONTNEED);
    sh->passes.fetch_add(1, std::memory_order_relaxed);
    usleep(10'000);  // a decode step's pace, not a spin
  }
}

Result<Workload> start_workload(const Args& a, std::uint64_t bytes) {
  void* m =
      mmap(nullptr, sizeof(Shared), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) return fail("mmap of the shared page failed", errno);
  Workload w;
  w.shared = new (m) Shared();
  w.pid = fork();
  if (w.pid < 0) return fail("fork failed", errno);
  if (w.pid == 0) run_child(a, bytes, w.shared);
  for (int i = 0; i < 6000 && w.shared->base.load() == 0; ++i) {
    int status = 0;
    if (waitpid(w.pid, &status, WNOHANG) == w.pid) {
      return fail(fmt::format("the target of {} GiB exited before it was ready", bytes / kGiB));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (w.shared->base.load() == 0) return fail("the target did not get ready within 120 s");
  w.range = {w.shared->base.load(), w.shared->base.load() + bytes};
  return w;
}

void stop_workload(Workload& w) {
  if (w.pid > 0) {
    kill(w.pid, SIGKILL);
    waitpid(w.pid, nullptr, 0);
  }
  if (w.shared != nullptr) munmap(w.shared, sizeof(Shared));
  w = {};
}

// utime + stime of a thread (/proc/PID/stat, at the clock tick's resolution), in seconds.
double cpu_seconds_of(Pid pid) {
  auto ns = agent::read_cpu_time(agent::HostPaths{}, pid);
  return ns ? static_cast<double>(*ns) / 1e9 : 0;
}

double secs(TimeNs ns) {
  return static_cast<double>(ns) / 1e9;
}

struct Figures {
  std::uint64_t gib = 0;
  agent::DamonSizing sizing;
  double setup_ms = 0;  // set_targets + set_ranges: the sysfs writes and "on"
  double track_ms = 0;  // the page-granularity table's track() of the mapping
  std::uint64_t regions_last = 0;
  std::uint64_t regions_min = UINT64_MAX;
  std::uint64_t regions_max = 0;
  std::uint64_t aggregations = 0;
  std::uint64_t hot_bytes = 0;  // regions with an access, last aggregation
  // The initial regions kvtierd wrote to sysfs: how many, and whether they tile the mapping.
  std::uint64_t written = 0;
  bool written_cover = false;
  bool in_range = true;  // each aggregation's regions tile the mapping, in order
  double window_s = 0;
  double kdamond_s = 0;
  double collect_s = 0;
  double heat_page_s = 0;
  double heat_region_s = 0;
  std::uint64_t steps = 0;
  std::uint64_t passes = 0;
};

// The initial regions kvtierd wrote for the target (sysfs, read back while it runs).
void read_written(const agent::DamonSource& src, const AddrRange& range, Figures& f) {
  const auto dir = agent::DamonSysfs::under(agent::HostPaths{}).context_dir(src.kdamond_index()) /
                   "targets/0/regions";
  auto n = agent::read_u64(dir / "nr_regions");
  if (!n) return;
  f.written = *n;
  std::uint64_t at = range.start;
  bool cover = *n > 0;
  for (std::uint64_t r = 0; r < *n && cover; ++r) {
    auto start = agent::read_u64(dir / std::to_string(r) / "start");
    auto end = agent::read_u64(dir / std::to_string(r) / "end");
    cover = start && end && *start == at && *end > *start;
    if (cover) at = *end;
  }
  f.written_cover = cover && at == range.end;
}

// The aggregations in a step's regions: the kdamond reports one target's
// regions in address order, so each aggregation starts again below the last
// one's end. Only whole ones count (from the mapping's start to its end: a
// drain can fall while the kdamond is still reporting one).
void note_regions(std::span<const RegionAccess> regions, const AddrRange& range, Figures& f) {
  std::size_t from = 0;
  for (std::size_t i = 1; i <= regions.size(); ++i) {
    if (i < regions.size() && regions[i].range.start >= regions[i - 1].range.end) continue;
    const auto agg = regions.subspan(from, i - from);
    from = i;
    if (agg.front().range.start != range.start || agg.back().range.end != range.end) continue;
    f.regions_last = agg.size();
    f.regions_min = std::min<std::uint64_t>(f.regions_min, agg.size());
    f.regions_max = std::max<std::uint64_t>(f.regions_max, agg.size());
    ++f.aggregations;
    f.hot_bytes = 0;
    std::uint64_t prev_end = range.start;
    for (const auto& r : agg) {
      if (r.range.start != prev_end || r.range.end <= r.range.start) f.in_range = false;
      prev_end = r.range.end;
      if (r.nr_accesses > 0) f.hot_bytes += r.range.bytes();
    }
  }
}

// The regions as Ingest::add_to_heat gives them to a target's heat table (in
// page granularity it skips the idle ones, which change no tracked page).
void add_regions(policy::HeatTable& t, std::span<const RegionAccess> regions,
                 const AddrRange& range) {
  for (const auto& r : regions) {
    if (r.range.end <= range.start || r.range.start >= range.end) continue;
    if (r.nr_accesses == 0 && t.granularity() == policy::Granularity::kPage) continue;
    RegionAccess part = r;
    part.range = {std::max(range.start, r.range.start), std::min(range.end, r.range.end)};
    t.add(part);
  }
}

struct Tables {
  policy::HeatTable page;
  policy::HeatTable region;
};

Tables make_tables(const agent::DamonOptions& opts) {
  const auto params = [&](policy::Granularity g) {
    return policy::HeatParams{.granularity = g,
                              .region_interval = static_cast<TimeNs>(opts.aggr_us) * 1000,
                              .region_touch_share = 0.5};
  };
  return Tables{policy::HeatTable(params(policy::Granularity::kPage)),
                policy::HeatTable(params(policy::Granularity::kRegion))};
}

// One step: drain, then both tables; CPU of this thread for each part.
Result<void> step(agent::DamonSource& src, Tables& t, const Workload& w, Figures& f, bool count) {
  agent::SourceBatch b;
  const TimeNs c0 = agent::thread_cpu_now();
  if (auto ok = src.collect(agent::monotonic_now(), b); !ok) return ok;
  const TimeNs c1 = agent::thread_cpu_now();
  add_regions(t.page, b.regions, w.range);
  const TimeNs c2 = agent::thread_cpu_now();
  add_regions(t.region, b.regions, w.range);
  const TimeNs c3 = agent::thread_cpu_now();
  note_regions(b.regions, w.range, f);
  if (count) {
    f.collect_s += secs(c1 - c0);
    f.heat_page_s += secs(c2 - c1);
    f.heat_region_s += secs(c3 - c2);
    ++f.steps;
  }
  return {};
}

// Watches the running workload `w` with kvtierd's DAMON source.
Result<void> watch(const Args& a, const Workload& w, Figures& f) {
  agent::DamonOptions opts = agent::source_options(policy::Config{}).damon;
  opts.min_regions = a.min_regions;
  opts.max_regions = a.max_regions;
  agent::DamonSource src(agent::HostPaths{}, opts);
  if (const auto av = src.probe(); !av.ok) return fail(fmt::format("damon: {}", av.why));
  if (auto ok = src.start(); !ok) return ok;
  const TimeNs s0 = agent::thread_cpu_now();
  const Pid pid = w.pid;
  if (auto ok = src.set_targets(std::span<const Pid>(&pid, 1)); !ok) return ok;
  const std::vector<agent::TargetRanges> ranges = {
      agent::TargetRanges{.pid = pid, .ranges = {w.range}}};
  if (auto ok = src.set_ranges(ranges); !ok) return ok;
  f.setup_ms = secs(agent::thread_cpu_now() - s0) * 1e3;
  f.sizing = src.sizing();
  read_written(src, w.range, f);
  Tables t = make_tables(opts);
  const TimeNs k0 = agent::thread_cpu_now();
  t.page.track(w.range, 0, agent::monotonic_now());
  t.region.track(w.range, 0, agent::monotonic_now());
  f.track_ms = secs(agent::thread_cpu_now() - k0) * 1e3;
  const auto step_for = std::chrono::duration<double>(a.step_s);
  const int warm = static_cast<int>(std::ceil(a.warmup_s / a.step_s));
  const int steps = static_cast<int>(std::ceil(a.seconds / a.step_s));
  double kd0 = 0;
  std::uint64_t p0 = 0;
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < warm + steps; ++i) {
    if (i == warm) {
      kd0 = cpu_seconds_of(src.kdamond_pid());
      p0 = w.shared->passes.load();
      t0 = std::chrono::steady_clock::now();
    }
    std::this_thread::sleep_for(step_for);
    if (auto ok = step(src, t, w, f, i >= warm); !ok) return ok;
  }
  f.window_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  f.kdamond_s = cpu_seconds_of(src.kdamond_pid()) - kd0;
  f.passes = w.shared->passes.load() - p0;
  src.stop();
  return {};
}

Result<Figures> measure(const Args& a, std::uint64_t gib) {
  Figures f{.gib = gib};
  auto w = start_workload(a, gib * kGiB);
  if (!w) return std::unexpected(w.error());
  auto ok = watch(a, *w, f);
  stop_workload(*w);
  if (!ok) return std::unexpected(ok.error());
  return f;
}

double per_step_ms(double s, const Figures& f) {
  return f.steps > 0 ? s * 1e3 / static_cast<double>(f.steps) : 0;
}

void print_row(const Figures& f) {
  fmt::print(
      "{:>6} {:>9} {:>10} {:>14} {:>9.1f} {:>9.2f} {:>11.3f} {:>11.3f} {:>11.3f} {:>11.3f} "
      "{:>9} {:>7}\n",
      f.gib, fmt::format("{}-{}", f.sizing.nr_regions.min, f.sizing.nr_regions.max),
      fmt::format("{}/{}", f.sizing.intervals.sample_us / 1000, f.sizing.intervals.aggr_us / 1000),
      fmt::format("{} ({}-{})", f.regions_last, f.aggregations > 0 ? f.regions_min : 0,
                  f.regions_max),
      static_cast<double>(f.hot_bytes) / static_cast<double>(kMiB),
      100 * f.kdamond_s / std::max(f.window_s, 1e-9), f.setup_ms, per_step_ms(f.collect_s, f),
      per_step_ms(f.heat_page_s, f), per_step_ms(f.heat_region_s, f),
      fmt::format("{} {}", f.written, f.written_cover ? "tile" : "NO"), f.in_range ? "yes" : "NO");
}

void print_json(const Figures& f) {
  fmt::print(
      "JSON {{\"gib\": {}, \"min_regions\": {}, \"max_regions\": {}, \"sample_us\": {}, "
      "\"aggr_us\": {}, \"regions_last\": {}, \"regions_min\": {}, \"regions_max\": {}, "
      "\"aggregations\": {}, \"written\": {}, \"written_cover\": {}, \"hot_mib\": {:.3f}, "
      "\"in_range\": {}, \"window_s\": {:.2f}, "
      "\"kdamond_s\": {:.3f}, \"setup_ms\": {:.3f}, \"track_ms\": {:.3f}, \"steps\": {}, "
      "\"collect_ms_per_step\": {:.4f}, \"heat_page_ms_per_step\": {:.4f}, "
      "\"heat_region_ms_per_step\": {:.4f}, \"workload_passes\": {}}}\n",
      f.gib, f.sizing.nr_regions.min, f.sizing.nr_regions.max, f.sizing.intervals.sample_us,
      f.sizing.intervals.aggr_us, f.regions_last, f.aggregations > 0 ? f.regions_min : 0,
      f.regions_max, f.aggregations, f.written, f.written_cover,
      static_cast<double>(f.hot_bytes) / static_cast<double>(kMiB), f.in_range, f.window_s,
      f.kdamond_s, f.setup_ms, f.track_ms, f.steps, per_step_ms(f.collect_s, f),
      per_step_ms(f.heat_page_s, f), per_step_ms(f.heat_region_s, f), f.passes);
}

// log(y2/y1) / log(x2/x1); "-" where a figure is 0 (below the clock's resolution).
std::string exponent(double y1, double y2, double x1, double x2) {
  if (y1 <= 0 || y2 <= 0 || x1 <= 0 || x2 <= x1) return "-";
  return fmt::format("{:.2f}", std::log(y2 / y1) / std::log(x2 / x1));
}

void print_exponents(const Figures& a, const Figures& b) {
  const auto x1 = static_cast<double>(a.gib);
  const auto x2 = static_cast<double>(b.gib);
  fmt::print(
      "exponent {:>5} -> {:<5} GiB: kdamond {:>6}  setup {:>6}  collect {:>6}  heat(page) {:>6}  "
      "heat(region) {:>6}  regions {:>6}\n",
      a.gib, b.gib, exponent(a.kdamond_s / a.window_s, b.kdamond_s / b.window_s, x1, x2),
      exponent(a.setup_ms, b.setup_ms, x1, x2), exponent(a.collect_s, b.collect_s, x1, x2),
      exponent(a.heat_page_s, b.heat_page_s, x1, x2),
      exponent(a.heat_region_s, b.heat_region_s, x1, x2),
      exponent(static_cast<double>(a.regions_last), static_cast<double>(b.regions_last), x1, x2));
}

bool parse(int argc, char** argv, Args& a) {
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    const std::string v = argv[i + 1];
    if (k == "--sizes-gib") {
      a.sizes_gib.clear();
      std::stringstream ss(v);
      for (std::string s; std::getline(ss, s, ',');) {
        a.sizes_gib.push_back(std::strtoull(s.c_str(), nullptr, 10));
      }
    } else if (k == "--seconds") {
      a.seconds = std::strtod(v.c_str(), nullptr);
    } else if (k == "--warmup-s") {
      a.warmup_s = std::strtod(v.c_str(), nullptr);
    } else if (k == "--step-s") {
      a.step_s = std::strtod(v.c_str(), nullptr);
    } else if (k == "--resident-mib") {
      a.resident_mib = std::strtoull(v.c_str(), nullptr, 10);
    } else if (k == "--hot-every") {
      a.hot_every = std::strtoull(v.c_str(), nullptr, 10);
    } else if (k == "--min-regions") {
      a.min_regions = std::strtoull(v.c_str(), nullptr, 10);
    } else if (k == "--max-regions") {
      a.max_regions = std::strtoull(v.c_str(), nullptr, 10);
    } else if (k == "--hot" && (v == "spread" || v == "clustered")) {
      a.clustered = v == "clustered";
    } else {
      return false;
    }
  }
  const bool sizes_ok = !a.sizes_gib.empty() &&
                        std::ranges::all_of(a.sizes_gib, [](auto g) { return g > 0; }) &&
                        std::ranges::is_sorted(a.sizes_gib);
  const bool bounds_ok = a.min_regions.value_or(3) >= 3 && a.max_regions.value_or(3) >= 3 &&
                         a.min_regions.value_or(0) <= a.max_regions.value_or(UINT64_MAX);
  return argc % 2 == 1 && sizes_ok && bounds_ok && a.seconds > 0 && a.step_s > 0 &&
         a.warmup_s >= 0 && a.resident_mib > 0 && a.hot_every > 0;
}

int run(int argc, char** argv) {
  Args a;
  if (!parse(argc, argv, a)) {
    std::fprintf(stderr,
                 "usage: kvtier_damon_scale [--sizes-gib 1,4,16,64 (ascending)] [--seconds S] "
                 "[--warmup-s S] [--step-s S] [--resident-mib N] [--hot-every K] "
                 "[--hot spread|clustered] [--min-regions N --max-regions N]\n");
    return 2;
  }
  spdlog::set_level(spdlog::level::warn);
  fmt::print("{:>6} {:>9} {:>10} {:>14} {:>9} {:>9} {:>11} {:>11} {:>11} {:>11} {:>9} {:>7}\n",
             "GiB", "regions", "sample/agg", "DAMON regions", "hot MiB", "kdamond%", "setup ms",
             "drain ms", "heat(pg)ms", "heat(rg)ms", "written", "inside");
  std::vector<Figures> all;
  for (const std::uint64_t gib : a.sizes_gib) {
    auto f = measure(a, gib);
    if (!f) {
      std::fprintf(stderr, "kvtier_damon_scale: %llu GiB: %s\n",
                   static_cast<unsigned long long>(gib), f.error().message.c_str());
      return 1;
    }
    print_row(*f);
    print_json(*f);
    std::fflush(stdout);
    all.push_back(*f);
  }
  for (std::size_t i = 1; i < all.size(); ++i) print_exponents(all[i - 1], all[i]);
  if (all.size() > 2) print_exponents(all.front(), all.back());
  return 0;
}

}  // namespace
}  // namespace kvtier::bench

int main(int argc, char** argv) {
  return kvtier::bench::guarded_main("kvtier_damon_scale", 1,
                                     [&] { return kvtier::bench::run(argc, argv); });
}
