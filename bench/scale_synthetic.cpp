// kvtier_scale_bench's synthetic run (scale_bench.hpp): a /proc tree in a temporary
// directory holds the generator's processes, whose pools the generator places, samples and
// locates; the controller and everything it runs are the real ones, the mover only counts.

#include <fmt/format.h>
#include <malloc.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "agent/host/host_paths.hpp"
#include "agent/host/residency.hpp"
#include "agent/loop/controller.hpp"
#include "agent/sources/hotness_source.hpp"
#include "agent/telemetry/telemetry.hpp"
#include "bench/scale_bench.hpp"
#include "bench/scale_generator.hpp"
#include "policy/error.hpp"
#include "policy/topology.hpp"
#include "policy/types.hpp"

namespace kvtier::bench {
namespace {

using agent::Controller;
using agent::ControllerDeps;

constexpr Pid kFirstPid = 5000;
constexpr TimeNs kT0 = 1000 * kSec;
// The steady state: steps from ten minutes after the pool was first tracked.
constexpr TimeNs kSteady = kT0 + 600 * kSec;

// The hotness source: hands the loop the batch the bench prepared before the
// step (so the generator's work is not the loop's CPU).
class PreparedSource final : public agent::HotnessSource {
 public:
  [[nodiscard]] SourceKind kind() const override { return SourceKind::kFault; }
  [[nodiscard]] agent::Availability probe() const override {
    return {.ok = true, .why = "the scale benchmark's generator"};
  }
  Result<void> start() override { return {}; }
  Result<void> set_targets(std::span<const Pid> /*pids*/) override { return {}; }
  Result<void> collect(TimeNs /*now*/, agent::SourceBatch& out) override {
    out.samples = std::exchange(next, {});
    return {};
  }
  void stop() override {}
  std::vector<AccessSample> next;
};

// A DRAM node with the CPUs and a CPU-less node in a lower tier, sized so the
// steady state fits: DRAM holds the hot and warm blocks with room to spare.
policy::Topology two_tiers(std::uint64_t dram_used, std::uint64_t cxl_used,
                           std::uint64_t dram_total, std::uint64_t cxl_total) {
  policy::Topology t;
  t.nodes.push_back(policy::NumaNode{.id = 0,
                                     .cpus = {0, 1},
                                     .mem_total_bytes = dram_total,
                                     .mem_free_bytes = dram_total - dram_used,
                                     .distance = {{0, 10}, {1, 20}},
                                     .memory_tier = 4});
  t.nodes.push_back(policy::NumaNode{.id = 1,
                                     .mem_total_bytes = cxl_total,
                                     .mem_free_bytes = cxl_total - cxl_used,
                                     .distance = {{0, 20}, {1, 10}},
                                     .memory_tier = 22});
  return t;
}

// The synthetic kernel's own moves (its reclaim's demotions): `demoted` pages since boot.
void write_vmstat(const std::filesystem::path& root, std::uint64_t demoted) {
  std::filesystem::create_directories(root / "proc");
  std::ofstream(root / "proc/vmstat") << fmt::format(
      "nr_free_pages 1000\npgpromote_success 0\npgdemote_kswapd {}\npgdemote_direct 0\n", demoted);
}

// The /proc tree of the synthetic targets: one anonymous mapping, the pool.
void write_proc(const std::filesystem::path& root, const std::vector<Pool>& pools) {
  write_vmstat(root, 0);
  for (const auto& p : pools) {
    const auto dir = root / "proc" / std::to_string(p.pid);
    std::filesystem::create_directories(dir);
    std::ofstream(dir / "comm") << "kvscale\n";
    std::ofstream(dir / "cmdline") << "kvscale" << '\0';
    std::ofstream(dir / "cgroup") << "0::/kvscale\n";
    std::ofstream(dir / "maps") << fmt::format(
        "55d0c0a00000-55d0c0a2c000 r--p 00000000 fe:01 1835345   /usr/bin/kvscale\n"
        "{:x}-{:x} rw-p 00000000 00:00 0 \n"
        "7ffd1c000000-7ffd1c021000 rw-p 00000000 00:00 0         [stack]\n",
        p.range().start, p.range().end);
  }
}

// The synthetic targets' pools, `o.size` spread over `o.targets`.
std::vector<Pool> make_pools(const Synthetic& o) {
  std::mt19937_64 rng(33);
  std::vector<Pool> pools;
  pools.reserve(o.targets);
  for (std::size_t i = 0; i < o.targets; ++i) {
    pools.emplace_back(kFirstPid + static_cast<Pid>(i), o.size / o.targets, o.hot_share,
                       o.warm_share, rng, o.drawn_shares);
  }
  return pools;
}

// What the generator placed on each node, and the two nodes' sizes around it.
struct Placed {
  std::uint64_t dram_used = 0;
  std::uint64_t cxl_used = 0;
  std::uint64_t dram_total = 0;
  std::uint64_t cxl_total = 0;
};

Placed placed(const std::vector<Pool>& pools, std::uint64_t size) {
  Placed n;
  for (const auto& p : pools) {
    n.dram_used += p.bytes_on(0);
    n.cxl_used += p.bytes_on(1);
  }
  n.dram_total = 2 * n.dram_used + 16 * kGiB;
  n.cxl_total = n.cxl_used + size / 4 + 16 * kGiB;
  return n;
}

// The pools' page nodes as the move_pages status query.
agent::ResidencyReader generator_reader(const std::map<Pid, Pool*>& by_pid,
                                        std::uint64_t* asked = nullptr) {
  return agent::ResidencyReader(
      counted(
          [&by_pid](Pid pid, std::span<void*> pages, const int* /*nodes*/, std::span<int> status,
                    int) -> agent::MovePagesResult {
            auto it = by_pid.find(pid);
            if (it == by_pid.end()) return {.ret = -1, .err = ESRCH};
            for (std::size_t i = 0; i < pages.size(); ++i) {
              status[i] = it->second->node_of(reinterpret_cast<std::uint64_t>(pages[i]));
            }
            return {};
          },
          asked),
      4096, nullptr);
}

// The loop's pieces over the generator: the fixture /proc under `dir`, the pools' page nodes as
// the residency reader, two tiers as the topology, `source` and `mover`.
ControllerDeps synthetic_deps(const std::filesystem::path& dir, const std::map<Pid, Pool*>& by_pid,
                              const Placed& n, std::unique_ptr<PreparedSource> source,
                              std::unique_ptr<CountingMover> mover, std::uint64_t* asked) {
  ControllerDeps deps{.paths = agent::HostPaths::under(dir),
                      .residency = generator_reader(by_pid, asked),
                      .self = 1,
                      .topology = [=]() -> Result<policy::Topology> {
                        return two_tiers(n.dram_used, n.cxl_used, n.dram_total, n.cxl_total);
                      }};
  deps.sources.push_back({.source = std::move(source), .reason = "generator"});
  deps.mover = std::move(mover);
  return deps;
}

// The first step (the pool tracked and every page located), then the hot and warm blocks read
// once, 20 s before the steady state, between steps (the promotion tick's path: the evidence
// in, nothing to promote). What went wrong, or empty.
std::string warm_up(Controller& ctl, agent::Telemetry& tel, std::vector<Pool>& pools,
                    PreparedSource& src) {
  if (auto ok = ctl.step(agent::StepContext{.now = kT0}, tel); !ok) {
    return "first step: " + ok.error().message;
  }
  constexpr std::uint64_t kSlice = 4ULL << 20;
  constexpr TimeNs kWarmUp = kSteady - 20 * kSec;
  for (auto& p : pools) {
    for (const Kind k : {Kind::kWarm, Kind::kHot}) {
      for (std::uint64_t b = 0; b < p.kind.size();) {
        b = p.sample_all(k, b, kSlice, kWarmUp, src.next);
        if (auto ok = ctl.promote_step(agent::StepContext{.now = kWarmUp}, tel); !ok) {
          return "promotion tick: " + ok.error().message;
        }
      }
    }
  }
  return {};
}

// The mechanics: nothing moved in the steady state, every page tracked, every page's node as
// the generator has it. What disagrees, or empty.
std::string check_mechanics(const Controller& ctl, const Figures& f, std::uint64_t size,
                            const Placed& n) {
  std::uint64_t on0 = 0;
  std::uint64_t on1 = 0;
  for (const auto& [pid, t] : ctl.state().targets.all()) {
    auto n0 = t.bytes_per_node.find(0);
    auto n1 = t.bytes_per_node.find(1);
    on0 += n0 == t.bytes_per_node.end() ? 0 : n0->second;
    on1 += n1 == t.bytes_per_node.end() ? 0 : n1->second;
  }
  if (f.moves != 0) return fmt::format("the steady state planned {} page moves", f.moves);
  if (f.tracked != size) return fmt::format("tracked {} bytes of {}", f.tracked, size);
  if (on0 != n.dram_used || on1 != n.cxl_used) {
    return fmt::format("bytes per node {} / {}, the generator's {} / {}", on0, on1, n.dram_used,
                       n.cxl_used);
  }
  return {};
}

}  // namespace

Figures run_synthetic(const Synthetic& o, const std::filesystem::path& dir) {
  Figures f;
  std::vector<Pool> pools = make_pools(o);
  std::filesystem::remove_all(dir);
  write_proc(dir, pools);
  std::map<Pid, Pool*> by_pid;
  for (auto& p : pools) by_pid[p.pid] = &p;
  const Placed n = placed(pools, o.size);

  malloc_trim(0);
  const std::uint64_t rss0 = rss_bytes();
  auto source = std::make_unique<PreparedSource>();
  PreparedSource* src = source.get();
  auto mover = std::make_unique<CountingMover>();
  CountingMover* counted = mover.get();
  agent::Telemetry tel;
  Controller ctl(compiled(),
                 synthetic_deps(dir, by_pid, n, std::move(source), std::move(mover), &f.asked),
                 kT0);
  f.problem = warm_up(ctl, tel, pools, *src);
  if (!f.problem.empty()) return f;
  const std::uint64_t per_target = o.samples / o.targets;
  measure_steps(
      ctl, tel, o.steps, kSteady, kInterval,
      [&](int s) {
        const TimeNs now = kSteady + s * kInterval;
        if (o.kernel_moves) write_vmstat(dir, s + 1);
        for (auto& p : pools) p.sample_hot(per_target, now - kSec, src->next);
        f.samples = src->next.size();
        return now;
      },
      f, generator_reader(by_pid));
  f.rss = rss_bytes() - std::min(rss_bytes(), rss0);
  f.moves = counted->requested;
  if (f.problem.empty()) f.problem = check_mechanics(ctl, f, o.size, n);
  return f;
}

}  // namespace kvtier::bench
