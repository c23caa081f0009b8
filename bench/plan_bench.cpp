// plan() over 4 Mi tracked pages (16 GiB), one target and 64 targets, and a
// naive baseline (decay every page with exp2, sort everything, take the coldest
// prefix) in the same run. Prints time per plan(), the heat state's bytes per
// page, and plan()'s own peak heap use (counted by the operator new below).
//
//   build/bench/plan_bench [--benchmark_repetitions=N]

#include <benchmark/benchmark.h>
#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <map>
#include <memory>
#include <new>
#include <random>

#include "policy/planner.hpp"

namespace {

// Heap accounting: every allocation carries its size in a 16-byte header.
std::atomic<std::int64_t> g_live{0};
std::atomic<std::int64_t> g_peak{0};

void* counted_alloc(std::size_t n) {
  void* p = std::malloc(n + 16);  // NOLINT(cppcoreguidelines-no-malloc)
  if (p == nullptr) throw std::bad_alloc();
  *static_cast<std::size_t*>(p) = n;
  const std::int64_t live = g_live += static_cast<std::int64_t>(n);
  std::int64_t peak = g_peak.load();
  while (live > peak && !g_peak.compare_exchange_weak(peak, live)) {
  }
  return static_cast<char*>(p) + 16;
}

void counted_free(void* p) {
  if (p == nullptr) return;
  void* base = static_cast<char*>(p) - 16;
  g_live -= static_cast<std::int64_t>(*static_cast<std::size_t*>(base));
  std::free(base);  // NOLINT(cppcoreguidelines-no-malloc)
}

}  // namespace

void* operator new(std::size_t n) {
  return counted_alloc(n);
}
void* operator new[](std::size_t n) {
  return counted_alloc(n);
}
void operator delete(void* p) noexcept {
  counted_free(p);
}
void operator delete[](void* p) noexcept {
  counted_free(p);
}
void operator delete(void* p, std::size_t) noexcept {
  counted_free(p);
}
void operator delete[](void* p, std::size_t) noexcept {
  counted_free(p);
}

namespace kvtier::bench {
namespace {

using namespace kvtier::policy;  // NOLINT(google-build-using-namespace)

constexpr TimeNs kSec = 1'000'000'000;
constexpr std::uint64_t kGiB = 1ULL << 30;
constexpr std::uint64_t kTotalPages = 4ULL << 20;  // 16 GiB
constexpr TimeNs kNow = 10'000 * kSec;

// A KV cache: 16 GiB over `targets` processes, 75% on DRAM and 25% already on
// the CXL node; 5% of pages hot (read at every step), 15% warm, the rest idle
// for seconds to an hour (finished sequences kept for prefix reuse).
// Node 0: 64 GiB of DRAM with CPUs, `dram_free` of it free; node 1: 64 GiB of
// CPU-less memory in a lower tier, 56 GiB free.
Topology dram_and_cxl(std::uint64_t dram_free) {
  Topology t;
  t.nodes.push_back(NumaNode{.id = 0,
                             .cpus = {0, 1},
                             .mem_total_bytes = 64 * kGiB,
                             .mem_free_bytes = dram_free,
                             .distance = {{0, 10}, {1, 20}},
                             .memory_tier = 4});
  t.nodes.push_back(NumaNode{.id = 1,
                             .mem_total_bytes = 64 * kGiB,
                             .mem_free_bytes = 56 * kGiB,
                             .distance = {{0, 20}, {1, 10}},
                             .memory_tier = 22});
  return t;
}

struct World {
  Topology topo;
  std::vector<GroupConfig> groups;
  std::vector<std::unique_ptr<HeatTable>> tables;
  std::vector<TargetView> targets;
  LimitsConfig limits;

  explicit World(std::size_t ntargets) {
    topo = dram_and_cxl(8 * kGiB);
    for (int g = 0; g < 4; ++g) {
      GroupConfig gc{.name = fmt::format("g{}", g), .priority = g, .select = {.pid = {1}}};
      gc.policy.cold_age = 120 * kSec;
      gc.policy.dram_limit = 10 * kGiB / 4;
      groups.push_back(gc);
    }
    std::mt19937_64 rng(42);
    std::uniform_real_distribution<double> u(0, 1);
    const std::uint64_t per_target = kTotalPages / ntargets;
    for (std::size_t t = 0; t < ntargets; ++t) {
      const std::size_t g = t % groups.size();
      auto table = std::make_unique<HeatTable>(HeatParams{.half_life = groups[g].policy.half_life});
      const std::uint64_t base = 0x7f0000000000;
      // Tracked in 2 MiB blocks, as KV blocks are allocated; idle since a random time.
      for (std::uint64_t p = 0; p < per_target; p += kPagesPerChunk) {
        const int node = u(rng) < 0.25 ? 1 : 0;
        const auto since = static_cast<TimeNs>(u(rng) * 3600) * kSec;
        table->track({base + p * kPageSize, base + (p + kPagesPerChunk) * kPageSize}, node,
                     kNow - since);
      }
      for (std::uint64_t p = 0; p < per_target; ++p) {
        const double r = u(rng);
        if (r >= 0.2) continue;
        const std::uint32_t weight = r < 0.05 ? 1000 : 1;
        table->add(AccessSample{.addr = base + p * kPageSize,
                                .time = kNow - static_cast<TimeNs>(u(rng) * 60 * kSec),
                                .weight = weight});
      }
      targets.push_back(
          TargetView{.pid = static_cast<Pid>(1000 + t), .group = g, .heat = table.get()});
      tables.push_back(std::move(table));
    }
  }

  [[nodiscard]] Snapshot snapshot() const {
    return Snapshot{.topology = &topo,
                    .groups = groups,
                    .limits = limits,
                    .targets = targets,
                    .now = kNow,
                    .budget_bytes = limits.migrate_burst};
  }
  [[nodiscard]] std::uint64_t heat_bytes() const {
    std::uint64_t b = 0;
    for (const auto& t : tables) b += t->memory_bytes();
    return b;
  }
};

void BM_Plan(benchmark::State& state) {
  const World w(static_cast<std::size_t>(state.range(0)));
  const Snapshot snap = w.snapshot();
  std::int64_t peak = 0;
  std::size_t moves = 0;
  std::uint64_t moved = 0;
  for (auto _ : state) {  // NOLINT(clang-analyzer-deadcode.DeadStores)
    const std::int64_t before = g_live.load();
    g_peak = before;
    Plan p = plan(snap);
    peak = std::max(peak, g_peak.load() - before);
    moves = p.moves.size();
    moved = p.demote_bytes + p.promote_bytes;
    benchmark::DoNotOptimize(p);
  }
  state.counters["pages"] = static_cast<double>(kTotalPages);
  state.counters["heat_MiB"] = static_cast<double>(w.heat_bytes()) / (1 << 20);
  state.counters["heat_B_per_page"] =
      static_cast<double>(w.heat_bytes()) / static_cast<double>(kTotalPages);
  state.counters["plan_peak_MiB"] = static_cast<double>(peak) / (1 << 20);
  state.counters["moves"] = static_cast<double>(moves);
  state.counters["moved_MiB"] = static_cast<double>(moved) / (1 << 20);
}

// The floor: visit every unit once with its decayed heat, decide nothing.
void BM_ScanOnly(benchmark::State& state) {
  const World w(static_cast<std::size_t>(state.range(0)));
  for (auto _ : state) {  // NOLINT(clang-analyzer-deadcode.DeadStores)
    double sum = 0;
    for (const auto& t : w.tables) {
      t->for_each_unit(kNow, [&](const HeatUnit& u) { sum += u.heat; });
    }
    benchmark::DoNotOptimize(sum);
  }
}

// What one would write first: decay every page with exp2, sort all of them,
// take the coldest until the budget is spent. No rules, no limits.
void BM_NaiveFullSort(benchmark::State& state) {
  const World w(static_cast<std::size_t>(state.range(0)));
  const double ln2 = std::log(2.0);
  std::int64_t peak = 0;
  for (auto _ : state) {  // NOLINT(clang-analyzer-deadcode.DeadStores)
    const std::int64_t before = g_live.load();
    g_peak = before;
    struct Item {
      double heat;
      std::uint64_t addr;
      std::size_t target;
    };
    std::vector<Item> items;
    for (std::size_t t = 0; t < w.tables.size(); ++t) {
      const double hl = static_cast<double>(w.tables[t]->decay().half_life()) / 1e9;
      w.tables[t]->for_each_unit(kNow, [&](const HeatUnit& u) {
        const double idle = static_cast<double>(kNow - from_tick(u.last_access)) / 1e9;
        items.push_back({u.heat * std::exp(-idle * ln2 / hl), u.range.start, t});
      });
    }
    std::sort(items.begin(), items.end(),
              [](const Item& a, const Item& b) { return a.heat < b.heat; });
    std::uint64_t budget = w.limits.migrate_burst;
    std::vector<PlannedMove> moves;
    for (const auto& i : items) {
      if (budget < kPageSize) break;
      budget -= kPageSize;
      moves.push_back(PlannedMove{.pid = 1, .range = {i.addr, i.addr + kPageSize}});
    }
    peak = std::max(peak, g_peak.load() - before);
    benchmark::DoNotOptimize(moves);
  }
  state.counters["plan_peak_MiB"] = static_cast<double>(peak) / (1 << 20);
}

// A promotion tick with DRAM full (nothing free above the kernel's watermarks,
// min_free 16 MiB short): 16 Ki pages wait on the slow node, and the spare holds
// 8 MiB of exchangeable warm pages, less than the 16 MiB the first promotion
// needs, so the exchange falls short for every waiting page. It remembers a
// whole scan that fell short: one scan, not one per waiting page.
void BM_PromotionTickDramFull(benchmark::State& state) {
  const Topology topo = dram_and_cxl(0);
  GroupConfig g{.name = "g", .select = {.pid = {1}}};
  g.policy.cold_age = 10 * kSec;
  const std::vector<GroupConfig> groups{g};
  HeatTable table(HeatParams{.half_life = g.policy.half_life});
  const std::uint64_t base = 0x7f0000000000;
  constexpr std::uint64_t kWarm = 2048;
  constexpr std::uint64_t kWaiting = 16384;
  std::vector<PromotionCandidate> spare;
  std::vector<PromotionCandidate> cands;
  spare.reserve(kWarm);
  cands.reserve(kWaiting);
  for (std::uint64_t p = 0; p < kWarm; ++p) {
    table.track({base + p * kPageSize, base + (p + 1) * kPageSize}, 0, kNow - 9 * kSec);
  }
  for (std::uint64_t p = kWarm; p < kWarm + kWaiting; ++p) {
    const AddrRange r{base + p * kPageSize, base + (p + 1) * kPageSize};
    table.track(r, 1, kNow - 600 * kSec);
    table.mark_moved(r, 1, kNow - 300 * kSec, true);
    table.add(AccessSample{.addr = r.start, .time = kNow - kSec});
  }
  for (std::uint64_t p = 0; p < kWarm; ++p) {
    spare.push_back({.unit = *table.at(base + p * kPageSize, kNow)});
  }
  for (std::uint64_t p = kWarm; p < kWarm + kWaiting; ++p) {
    cands.push_back({.unit = *table.at(base + p * kPageSize, kNow)});
  }
  LimitsConfig limits;
  limits.dram_headroom = 0;
  const Snapshot snap{.topology = &topo,
                      .groups = groups,
                      .limits = limits,
                      .targets = {TargetView{.pid = 1, .group = 0, .heat = &table}},
                      .now = kNow,
                      .budget_bytes = 64 * kGiB};
  std::uint64_t promoted = 0;
  for (auto _ : state) {  // NOLINT(clang-analyzer-deadcode.DeadStores)
    Plan p = plan_promotions(snap, cands, spare);
    promoted = p.promote_bytes;
    benchmark::DoNotOptimize(p);
  }
  state.counters["waiting"] = static_cast<double>(kWaiting);
  state.counters["promoted_pages"] = static_cast<double>(promoted) / kPageSize;
}

BENCHMARK(BM_Plan)->Arg(1)->Arg(64)->Unit(benchmark::kMillisecond)->MinTime(2.0);
BENCHMARK(BM_ScanOnly)->Arg(1)->Arg(64)->Unit(benchmark::kMillisecond)->MinTime(2.0);
BENCHMARK(BM_NaiveFullSort)->Arg(1)->Arg(64)->Unit(benchmark::kMillisecond)->MinTime(2.0);
BENCHMARK(BM_PromotionTickDramFull)->Unit(benchmark::kMillisecond)->MinTime(2.0);

// Records each run's time so main() can print plan() against the baseline.
class RatioReporter : public benchmark::ConsoleReporter {
 public:
  void ReportRuns(const std::vector<Run>& runs) override {
    for (const auto& r : runs) {
      if (r.run_type == Run::RT_Iteration) times_[r.benchmark_name()] = r.GetAdjustedRealTime();
    }
    ConsoleReporter::ReportRuns(runs);
  }
  void print_ratios() const {
    for (const char* arg : {"1", "64"}) {
      auto p = times_.find(fmt::format("BM_Plan/{}/min_time:2.000", arg));
      auto n = times_.find(fmt::format("BM_NaiveFullSort/{}/min_time:2.000", arg));
      if (p == times_.end() || n == times_.end()) continue;
      fmt::print("targets={}: plan() {:.1f} ms, naive full sort {:.1f} ms, naive/plan = {:.2f}x\n",
                 arg, p->second, n->second, n->second / p->second);
    }
  }

 private:
  std::map<std::string, double> times_;
};

}  // namespace
}  // namespace kvtier::bench

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  kvtier::bench::RatioReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  reporter.print_ratios();
  benchmark::Shutdown();
  return 0;
}
