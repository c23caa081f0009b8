// kvtier_scale_bench's real run (scale_bench.hpp): a child process maps and reads
// its memory; the controller runs against the live /proc and /sys with the hotness
// sources this host supports, move_pages(2) as the residency query, in real time.

#include <fmt/format.h>
#include <malloc.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <utility>

#include "agent/host/clock.hpp"
#include "agent/host/host_paths.hpp"
#include "agent/host/huge_pages.hpp"
#include "agent/host/move_pages_call.hpp"
#include "agent/host/residency.hpp"
#include "agent/host/topology_reader.hpp"
#include "agent/loop/controller.hpp"
#include "agent/sources/source_registry.hpp"
#include "agent/telemetry/telemetry.hpp"
#include "bench/scale_bench.hpp"
#include "bench/scale_generator.hpp"
#include "policy/config.hpp"
#include "policy/error.hpp"
#include "policy/topology.hpp"
#include "policy/types.hpp"
#include "policy/units.hpp"

namespace kvtier::bench {
namespace {

using agent::Controller;
using agent::ControllerDeps;

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

}  // namespace

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

}  // namespace kvtier::bench
