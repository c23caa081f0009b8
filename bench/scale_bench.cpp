// The whole control-loop step (agent::Controller::step: discover, the sources'
// drain into the heat tables, residency, plan, dispatch, record and telemetry)
// at many sizes of tracked memory, for issue 33
// (docs/benchmarks.md#scale-the-step-from-16-gib-to-4-tib).
//
// Synthetic (each size in --sizes): a /proc tree in a temporary directory
// holds N processes whose one anonymous mapping is the KV pool; a generator
// gives it the KV shape (sequences of 64 KiB blocks: a few percent hot, read at
// every step; some warm, read 20 s before; the rest idle for ten minutes and
// on the CXL node), and serves as the hotness source (page samples of the hot
// blocks, at most --samples a step: the kernel's NUMA scan samples a bounded
// rate, not the pool), as the move_pages status query (the node of every
// page) and as the node sizes. The controller, the heat tables, the planner,
// the residency reader and the telemetry are the real ones; the mover only
// records. A size whose heat state would not fit in this machine's free memory
// is reported as such, with the extrapolation from the sizes measured.
//
// Real (--real SIZE): a child process maps SIZE of anonymous memory (4 KiB
// pages), writes all of it and reads a few percent of it over and over; the
// controller runs against the live /proc and /sys, the hotness sources the
// host supports (as kvtierd chooses them) and move_pages(2) as a query, in
// real time. The host has one node: the planner is shown a CXL node 1 with
// nothing on it, and the mover only records.
//
//   kvtier_scale_bench [--sizes 16GiB,128GiB,1TiB,4TiB] [--steps 6] [--targets 1]
//                      [--hot-share 0.03] [--hot-bytes SIZE] [--kernel-moves] [--real SIZE]
//
// Prints per size: the resident memory the loop added (kvtierd's side, the
// generator's own excluded), bytes per tracked page, the step's CPU by phase
// (mean over --steps steps 5 s apart, one of them with the residency check
// kvtierd makes every 30 s: agent/loop/residency_check.hpp), the check's
// residency phase and the pages it asked the move_pages query about (the
// kernel's cost: about 190 ns a page), a read of every page's node (what that
// phase cost before the check), plan()'s time alone, and the growth exponent
// between sizes. Exits 1 when the loop's mechanics disagree with the generator
// (tracked bytes, bytes per node, moves in the steady state).

#include <fmt/format.h>
#include <malloc.h>
#include <spdlog/spdlog.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <span>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "agent/host/clock.hpp"
#include "agent/host/host_paths.hpp"
#include "agent/host/huge_pages.hpp"
#include "agent/host/move_pages_call.hpp"
#include "agent/host/residency.hpp"
#include "agent/host/topology_reader.hpp"
#include "agent/loop/controller.hpp"
#include "agent/loop/loop_state.hpp"
#include "agent/movers/mover.hpp"
#include "agent/sources/hotness_source.hpp"
#include "agent/sources/source_registry.hpp"
#include "agent/telemetry/telemetry.hpp"
#include "bench/scale_generator.hpp"
#include "policy/config.hpp"
#include "policy/heat.hpp"
#include "policy/planner.hpp"
#include "policy/types.hpp"
#include "policy/units.hpp"

namespace kvtier::bench {
namespace {

using agent::Controller;
using agent::ControllerDeps;

constexpr TimeNs kInterval = 5 * kSec;
constexpr std::uint64_t kMiB = 1ULL << 20;
constexpr std::uint64_t kGiB = 1ULL << 30;
constexpr Pid kFirstPid = 5000;
constexpr TimeNs kT0 = 1000 * kSec;
// The steady state: steps from ten minutes after the pool was first tracked.
constexpr TimeNs kSteady = kT0 + 600 * kSec;

constexpr std::string_view kConfig = R"(
[daemon]
interval = "5s"
[[group]]
name = "kv"
[group.select]
comm = ["^kvscale"]
[group.policy]
cold_age = "120s"
)";

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

// Moves nothing: counts what the plan asked for, and says it moved.
class CountingMover final : public agent::Mover {
 public:
  [[nodiscard]] std::string_view name() const override { return "counting"; }
  MoveStats move(Pid /*pid*/, std::span<const AddrRange> ranges, int /*to_node*/) override {
    MoveStats st;
    for (const auto& r : ranges) {
      st.requested += r.bytes() / kPageSize;
      st.moved += r.bytes() / kPageSize;
      st.bytes_moved += r.bytes();
    }
    requested += st.requested;
    return st;
  }
  std::uint64_t requested = 0;
};

std::uint64_t rss_bytes() {
  std::ifstream in("/proc/self/statm");
  std::uint64_t size = 0;
  std::uint64_t resident = 0;
  in >> size >> resident;
  return resident * static_cast<std::uint64_t>(sysconf(_SC_PAGESIZE));
}

std::uint64_t mem_available() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  std::uint64_t kib = 0;
  std::string unit;
  while (in >> key >> kib >> unit) {
    if (key == "MemAvailable:") return kib * 1024;
  }
  return 0;
}

double ms(TimeNs t) {
  return static_cast<double>(t) / 1e6;
}

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

// What one size measured.
struct Figures {
  std::uint64_t tracked = 0;      // bytes
  std::uint64_t rss = 0;          // resident bytes the loop added
  std::uint64_t heat = 0;         // HeatTable::memory_bytes, all targets
  agent::LoopCpu cpu{};           // per step, mean
  TimeNs step_cpu = 0;            // per step, mean, all phases
  TimeNs check_residency = 0;     // the residency phase of the step with the 30 s check
  TimeNs full_read = 0;           // a read of every tracked page's node (the check's predecessor)
  std::uint64_t asked = 0;        // pages the residency reader has asked the query about
  std::uint64_t check_asked = 0;  // of them, in the step with the check
  TimeNs plan = 0;                // policy::plan alone, the fastest of 3
  std::uint64_t samples = 0;      // per step
  std::uint64_t moves = 0;        // pages the steady state's plans asked to move
  std::string problem;            // the mechanics disagreed
};

// policy::plan over the loop's state as the controller's plan phase sees it.
TimeNs time_plan(const agent::LoopState& st, TimeNs now) {
  policy::Snapshot snap{.topology = &st.topology,
                        .groups = st.config.config.groups,
                        .limits = st.config.config.limits,
                        .now = now,
                        .budget_bytes = st.config.config.limits.migrate_burst,
                        .cold_age = st.cold_ages()};
  for (const auto& [pid, t] : st.targets.all()) {
    snap.targets.push_back(policy::TargetView{.pid = pid, .group = t.group, .heat = t.heat.get()});
  }
  TimeNs best = 0;
  for (int i = 0; i < 3; ++i) {
    const TimeNs a = agent::thread_cpu_now();
    const Plan p = policy::plan(snap);
    const TimeNs b = agent::thread_cpu_now();
    if (i == 0 || b - a < best) best = b - a;
    (void)p;
  }
  return best;
}

// What the residency phase cost every 30 s before issue 33's check: every tracked page's
// node read (ResidencyReader::map over the mappings), all targets.
TimeNs time_full_read(const agent::LoopState& st, agent::ResidencyReader reader) {
  const TimeNs a = agent::thread_cpu_now();
  for (const auto& [pid, t] : st.targets.all()) (void)reader.map(pid, t.vmas);
  return agent::thread_cpu_now() - a;
}

// Runs `steps` steady-state steps and fills the figures common to both modes.
// `before_step(now)` prepares each step's evidence; `reader` is the loop's residency
// reader's twin, for time_full_read.
template <class Before>
void measure_steps(Controller& ctl, agent::Telemetry& tel, int steps, TimeNs first, TimeNs interval,
                   Before&& before_step, Figures& f, agent::ResidencyReader reader) {
  const agent::LoopCpu start = ctl.state().cpu;
  TimeNs now = first;
  for (int s = 0; s < steps; ++s) {
    now = before_step(s);
    const agent::LoopCpu pre = ctl.state().cpu;
    const std::uint64_t asked = f.asked;
    if (auto ok = ctl.step(agent::StepContext{.now = now}, tel); !ok) {
      f.problem = "step: " + ok.error().message;
      return;
    }
    if (s == 0) {
      const auto r = static_cast<std::size_t>(agent::LoopPhase::kResidency);
      f.check_residency = ctl.state().cpu[r] - pre[r];
      f.check_asked = f.asked - asked;
    }
  }
  for (std::size_t i = 0; i < agent::kLoopPhases; ++i) {
    f.cpu[i] = (ctl.state().cpu[i] - start[i]) / steps;
    f.step_cpu += f.cpu[i];
  }
  f.plan = time_plan(ctl.state(), now);
  f.full_read = time_full_read(ctl.state(), std::move(reader));
  (void)interval;
  for (const auto& [pid, t] : ctl.state().targets.all()) {
    f.tracked += t.heat->tracked_bytes();
    f.heat += t.heat->memory_bytes();
  }
}

// The config is the bench's own: a mistake in it is the bench's bug.
policy::CompiledConfig compiled() {
  auto cc = policy::compile_config_text(kConfig, "scale_bench.toml");
  if (!cc) throw std::logic_error("scale_bench.toml: " + cc.error().front().to_string());
  return std::move(*cc);
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

struct Synthetic {
  std::uint64_t size = 0;
  std::size_t targets = 1;
  double hot_share = 0.03;
  double warm_share = 0.07;
  std::uint64_t samples = 320ULL * 1024;  // per step: 64 Ki pages/s, the NUMA scan's default
  int steps = 6;
  // The kernel demotes something between steps (its counter grows; no page of the pools moves):
  // the residency check reads the pages with evidence in full.
  bool kernel_moves = false;
};

// The synthetic targets' pools, `o.size` spread over `o.targets`.
std::vector<Pool> make_pools(const Synthetic& o) {
  std::mt19937_64 rng(33);
  std::vector<Pool> pools;
  pools.reserve(o.targets);
  for (std::size_t i = 0; i < o.targets; ++i) {
    pools.emplace_back(kFirstPid + static_cast<Pid>(i), o.size / o.targets, o.hot_share,
                       o.warm_share, rng);
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

// `query`, counting the pages it is asked about into `*asked` (if not null).
agent::MovePagesFn counted(agent::MovePagesFn query, std::uint64_t* asked) {
  if (asked == nullptr) return query;
  return [query = std::move(query), asked](Pid pid, std::span<void*> pages, const int* nodes,
                                           std::span<int> status, int flags) {
    *asked += pages.size();
    return query(pid, pages, nodes, status, flags);
  };
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

// The real run's child: `size` of anonymous memory, written once, then a few percent of its
// blocks read over and over. Its pid once the memory is written, or -1 with `skipped` set.
pid_t start_child(std::uint64_t size, double hot_share, std::string* skipped) {
  int ready[2];
  if (pipe(ready) != 0) {
    *skipped = fmt::format("pipe: errno {}", errno);
    return -1;
  }
  const pid_t child = fork();
  if (child == 0) {
    close(ready[0]);
    prctl(PR_SET_NAME, "kvscale-real");
    void* m = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) _exit(3);
    madvise(m, size, MADV_NOHUGEPAGE);
    auto* bytes = static_cast<volatile std::uint8_t*>(m);
    for (std::uint64_t a = 0; a < size; a += kPageSize) bytes[a] = 1;
    const char one = 1;
    if (write(ready[1], &one, 1) != 1) _exit(4);
    // A few percent of the blocks, read over and over.
    const auto stride = static_cast<std::uint64_t>(1.0 / hot_share);
    std::uint64_t sum = 0;
    for (;;) {
      for (std::uint64_t b = 0; b < size / kBlock; b += stride) {
        for (std::uint64_t p = 0; p < kBlock; p += kPageSize) sum += bytes[b * kBlock + p];
      }
      usleep(200'000);
      if (sum == 42) _exit(0);
    }
  }
  close(ready[1]);
  char c = 0;
  if (child < 0 || read(ready[0], &c, 1) != 1) {
    *skipped = fmt::format("the child did not map and write {} (status: no memory?)",
                           policy::format_size(size));
    if (child > 0) waitpid(child, nullptr, 0);
    return -1;
  }
  close(ready[0]);
  return child;
}

// The loop's pieces on this host: its /proc and residency, its topology's one node and an
// empty CXL node of `size` for the planner, the chosen sources, a counting mover.
ControllerDeps real_deps(const agent::HostPaths& paths, std::uint64_t size,
                         agent::SourceChoice& choice, std::uint64_t* asked) {
  ControllerDeps deps{
      .paths = paths,
      .residency = agent::ResidencyReader(counted(agent::system_move_pages(), asked), 4096,
                                          std::make_shared<agent::KpageflagsHugeProbe>(paths)),
      .self = getpid(),
      .topology = [paths, size]() -> Result<policy::Topology> {
        auto t = agent::read_topology(paths);
        if (!t) return t;
        // The one node as read, and an empty CXL node for the planner.
        policy::NumaNode cxl{.id = 1,
                             .mem_total_bytes = size,
                             .mem_free_bytes = size,
                             .distance = {{0, 20}, {1, 10}},
                             .memory_tier = 22};
        t->nodes.resize(1);
        t->nodes[0].distance[1] = 20;
        t->nodes[0].memory_tier = 4;
        t->nodes.push_back(cxl);
        return t;
      }};
  for (auto& s : choice.sources) {
    deps.sources.push_back({.source = std::move(s.source), .reason = s.reason});
  }
  deps.mover = std::make_unique<CountingMover>();
  return deps;
}

// The real run: a child with `size` of anonymous memory, the live sources.
Figures run_real(std::uint64_t size, int steps, double hot_share, std::string* skipped) {
  Figures f;
  const pid_t child = start_child(size, hot_share, skipped);
  if (child < 0) return f;
  const policy::CompiledConfig cc = compiled();
  agent::SourceRegistry reg;
  const agent::HostPaths paths{};
  agent::register_builtin_sources(reg, paths, agent::source_options(cc.config));
  auto choice = agent::select_sources(reg, cc.config.sources.use, cc.config.sources.force);
  if (!choice) {
    *skipped = "no hotness source on this host: " + choice.error().message;
    kill(child, SIGKILL);
    waitpid(child, nullptr, 0);
    return f;
  }
  fmt::print("real: sources: {}\n", choice->summary);
  malloc_trim(0);
  const std::uint64_t rss0 = rss_bytes();
  agent::Telemetry tel;
  const auto clock_now = [] { return agent::monotonic_now(); };
  Controller ctl(cc, real_deps(paths, size, *choice, &f.asked), clock_now());
  if (auto ok = ctl.step(agent::StepContext{.now = clock_now()}, tel); !ok) {
    f.problem = "first step: " + ok.error().message;
  } else {
    // The first measured step is 30 s after the first: the residency check.
    std::this_thread::sleep_for(std::chrono::seconds(30));
    measure_steps(
        ctl, tel, steps, 0, kInterval,
        [&](int s) {
          if (s > 0) std::this_thread::sleep_for(std::chrono::nanoseconds(kInterval));
          return clock_now();
        },
        f,
        agent::ResidencyReader(agent::system_move_pages(), 4096,
                               std::make_shared<agent::KpageflagsHugeProbe>(paths)));
    f.rss = rss_bytes() - std::min(rss_bytes(), rss0);
    if (f.problem.empty() && f.tracked < size) {
      f.problem = fmt::format("tracked {} bytes of the child's {}", f.tracked, size);
    }
  }
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  return f;
}

void print_header() {
  fmt::print(
      "{:>9} {:>10} {:>9} {:>8} {:>8} | {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} | {:>9} {:>9} "
      "{:>9} {:>9} {:>8}\n",
      "tracked", "pages", "rss_MiB", "B/page", "heat_B/p", "discover", "sources", "residency",
      "plan", "move", "record", "step_ms", "check_res", "chk_pages", "full_read", "plan()",
      "samples");
}

void print_row(const std::string& label, const Figures& f) {
  const double pages = static_cast<double>(f.tracked) / kPageSize;
  const auto cpu = [&](agent::LoopPhase p) { return ms(f.cpu[static_cast<std::size_t>(p)]); };
  fmt::print(
      "{:>9} {:>10.0f} {:>9.1f} {:>8.3f} {:>8.3f} | {:>9.2f} {:>9.2f} {:>9.2f} {:>9.2f} {:>9.2f} "
      "{:>9.2f} {:>9.2f} | {:>9.1f} {:>9} {:>9.1f} {:>9.2f} {:>8}\n",
      label, pages, static_cast<double>(f.rss) / kMiB, static_cast<double>(f.rss) / pages,
      static_cast<double>(f.heat) / pages, cpu(agent::LoopPhase::kDiscover),
      cpu(agent::LoopPhase::kSources), cpu(agent::LoopPhase::kResidency),
      cpu(agent::LoopPhase::kPlan), cpu(agent::LoopPhase::kMove), cpu(agent::LoopPhase::kRecord),
      ms(f.step_cpu), ms(f.check_residency), f.check_asked, ms(f.full_read), ms(f.plan), f.samples);
  std::fflush(stdout);  // a size can take minutes: each row as it comes
}

double exponent(double a, double b, double sa, double sb) {
  return a <= 0 || b <= 0 ? NAN : std::log(b / a) / std::log(sb / sa);
}

std::optional<std::uint64_t> parse_size(const std::string& s) {
  auto v = policy::parse_size(s);
  if (!v) return std::nullopt;
  return *v;
}

using Measured = std::vector<std::pair<std::uint64_t, Figures>>;

// --sizes: a comma-separated list of sizes of 64 MiB or more; std::nullopt after one line on
// stderr naming the word that is not.
std::optional<std::vector<std::uint64_t>> parse_sizes(const std::string& arg) {
  std::vector<std::uint64_t> sizes;
  for (std::size_t at = 0; at <= arg.size();) {
    const std::size_t comma = std::min(arg.find(',', at), arg.size());
    const std::string word = arg.substr(at, comma - at);
    auto v = parse_size(word);
    if (!v || *v < 64 * kMiB) {
      fmt::print(stderr, "scale_bench: --sizes: '{}' is not a size of 64MiB or more\n", word);
      return std::nullopt;
    }
    sizes.push_back(*v);
    at = comma + 1;
  }
  return sizes;
}

// A size that does not fit this machine: what the last two measured sizes' growth makes of it.
void print_extrapolation(const std::string& label, std::uint64_t size, const Measured& done) {
  if (done.size() < 2) return;
  const auto& [s1, f1] = done[done.size() - 2];
  const auto& [s2, f2] = done.back();
  const auto r = static_cast<double>(size) / static_cast<double>(s2);
  const double ec = exponent(static_cast<double>(f1.step_cpu), static_cast<double>(f2.step_cpu),
                             static_cast<double>(s1), static_cast<double>(s2));
  const double em = exponent(static_cast<double>(f1.rss), static_cast<double>(f2.rss),
                             static_cast<double>(s1), static_cast<double>(s2));
  fmt::print(
      "{:>9} extrapolated (exponents of the last two sizes): rss {:.0f} MiB, step {:.0f} "
      "ms\n",
      label, static_cast<double>(f2.rss) * std::pow(r, em) / kMiB,
      ms(f2.step_cpu) * std::pow(r, ec));
}

// Every size that fits, a row each (measured ones into `done`); whether one failed.
bool run_sizes(const std::vector<std::uint64_t>& sizes, const Synthetic& o,
               std::optional<std::uint64_t> hot_bytes, Measured& done) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / fmt::format("kvtier-scale-{}", getpid());
  bool failed = false;
  double bytes_per_page = 20.0;  // before any size was measured: the dense table's 16, and more
  for (const std::uint64_t size : sizes) {
    const std::string label = policy::format_size(size);
    const double need = bytes_per_page * (static_cast<double>(size) / kPageSize) * 1.25 +
                        (static_cast<double>(size) / kBlock) * 2;
    const std::uint64_t avail = mem_available();
    // Leave 4 GiB to the machine's other work.
    if (need > static_cast<double>(avail) - 4.0 * kGiB) {
      fmt::print(
          "{:>9} does not fit: needs about {:.1f} GiB at {:.2f} B/page, {:.1f} GiB available\n",
          label, need / kGiB, bytes_per_page, static_cast<double>(avail) / kGiB);
      print_extrapolation(label, size, done);
      continue;
    }
    Synthetic s = o;
    s.size = size;
    if (hot_bytes) {
      s.hot_share = static_cast<double>(*hot_bytes) * 0.3 / static_cast<double>(size);
      s.warm_share = static_cast<double>(*hot_bytes) * 0.7 / static_cast<double>(size);
    }
    const Figures f = run_synthetic(s, dir);
    std::filesystem::remove_all(dir);
    print_row(label, f);
    if (!f.problem.empty()) {
      fmt::print("{:>9} FAILED: {}\n", label, f.problem);
      failed = true;
      continue;
    }
    bytes_per_page =
        std::max(1.0, static_cast<double>(f.rss) / (static_cast<double>(size) / kPageSize));
    done.emplace_back(size, f);
  }
  return failed;
}

void print_growth(const Measured& done) {
  for (std::size_t i = 1; i < done.size(); ++i) {
    const std::uint64_t s1 = done[i - 1].first;
    const std::uint64_t s2 = done[i].first;
    const Figures& f1 = done[i - 1].second;
    const Figures& f2 = done[i].second;
    const auto e = [s1, s2](double a, double b) {
      return exponent(a, b, static_cast<double>(s1), static_cast<double>(s2));
    };
    fmt::print("growth {} -> {}: step CPU ^{:.2f}, rss ^{:.2f}, plan() ^{:.2f}\n",
               policy::format_size(s1), policy::format_size(s2),
               e(static_cast<double>(f1.step_cpu), static_cast<double>(f2.step_cpu)),
               e(static_cast<double>(f1.rss), static_cast<double>(f2.rss)),
               e(static_cast<double>(f1.plan), static_cast<double>(f2.plan)));
  }
}

// --real: its row, and how it compares with the synthetic run of the same size. The exit
// status: 0, 1 when the run failed, 2 when --real is not a size of 64 MiB or more.
int real_row(const std::string& real_arg, const Synthetic& o, const Measured& done) {
  auto size = parse_size(real_arg);
  if (!size || *size < 64 * kMiB) {
    fmt::print(stderr, "scale_bench: --real: '{}' is not a size of 64MiB or more\n", real_arg);
    return 2;
  }
  std::string skipped;
  const Figures f = run_real(*size, o.steps, o.hot_share, &skipped);
  if (!skipped.empty()) {
    fmt::print("real {}: skipped: {}\n", policy::format_size(*size), skipped);
    return 0;
  }
  print_row("real", f);
  const int rc = f.problem.empty() ? 0 : 1;
  if (rc != 0) fmt::print("real FAILED: {}\n", f.problem);
  for (const auto& [s, sf] : done) {
    if (s != *size) continue;
    fmt::print("real / synthetic at {}: step CPU {:.2f}x, rss {:.2f}x, plan() {:.2f}x\n",
               policy::format_size(s),
               static_cast<double>(f.step_cpu) / static_cast<double>(sf.step_cpu),
               static_cast<double>(f.rss) / static_cast<double>(sf.rss),
               static_cast<double>(f.plan) / static_cast<double>(sf.plan));
  }
  return rc;
}

void print_intro(const Synthetic& o, std::optional<std::uint64_t> hot_bytes) {
  fmt::print(
      "kvtier_scale_bench: {} target(s), KV blocks of 64 KiB in sequences of 16-1024, {}, "
      "{} page samples a step, {} steps 5 s apart (CPU per step is their mean; ms){}\n",
      o.targets,
      hot_bytes ? fmt::format("{} hot+warm whatever the size", policy::format_size(*hot_bytes))
                : fmt::format("{:.0f}% of sequences hot, {:.0f}% warm, the rest idle",
                              o.hot_share * 100, o.warm_share * 100),
      o.samples, o.steps, o.kernel_moves ? "; the kernel demotes elsewhere between steps" : "");
}

int run(int argc, char** argv) {
  CLI::App app{"the control loop's step at many sizes of tracked memory (issue 33)"};
  std::string sizes_arg = "16GiB,128GiB,1TiB,4TiB";
  std::string real_arg;
  std::string hot_bytes_arg;
  Synthetic o;
  app.add_option("--sizes", sizes_arg, "sizes of tracked memory, synthetic (comma-separated)");
  app.add_option("--steps", o.steps, "steady-state steps measured per size (5 s apart)")
      ->check(CLI::Range(1, 1000));
  app.add_option("--targets", o.targets, "processes the memory is spread over")
      ->check(CLI::Range(1, 4096));
  app.add_option("--hot-share", o.hot_share, "share of the sequences read at every step")
      ->check(CLI::Range(0.0, 0.5));
  app.add_option("--hot-bytes", hot_bytes_arg,
                 "hot and warm memory fixed at this size whatever the size (the added memory "
                 "is cold)");
  app.add_option("--samples", o.samples, "page samples per step (all targets)");
  app.add_option("--real", real_arg, "also a real run: a child with this much memory");
  app.add_flag("--kernel-moves", o.kernel_moves,
               "the kernel demotes elsewhere between steps: the residency check reads every page "
               "with evidence");
  CLI11_PARSE(app, argc, argv);
  spdlog::set_level(spdlog::level::warn);  // the loop's own lines: only what goes wrong

  const auto sizes = parse_sizes(sizes_arg);
  if (!sizes) return 2;
  std::optional<std::uint64_t> hot_bytes;
  if (!hot_bytes_arg.empty()) {
    hot_bytes = parse_size(hot_bytes_arg);
    if (!hot_bytes) {
      fmt::print(stderr, "scale_bench: --hot-bytes: '{}' is not a size\n", hot_bytes_arg);
      return 2;
    }
  }
  print_intro(o, hot_bytes);
  print_header();
  Measured done;
  const bool failed = run_sizes(*sizes, o, hot_bytes, done);
  print_growth(done);
  const int real = real_arg.empty() ? 0 : real_row(real_arg, o, done);
  if (real == 2) return 2;
  return failed || real != 0 ? 1 : 0;
}

}  // namespace
}  // namespace kvtier::bench

int main(int argc, char** argv) {
  try {
    return kvtier::bench::run(argc, argv);
  } catch (const std::exception& e) {
    std::fputs(fmt::format("scale_bench: {}\n", e.what()).c_str(), stderr);
    return 2;
  }
}
