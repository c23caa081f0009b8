// host_bench: what reading the host's state costs the control loop, on this
// machine's real /sys and /proc. A promotion tick needs only each node's free
// memory and reserve (refresh_node_memory); a cycle reads the whole topology
// (read_topology), which is the baseline measured in the same run.
// In the tiered guest: scripts/vm/run -- host_bench

#include <benchmark/benchmark.h>

#include "agent/host/host_paths.hpp"
#include "agent/host/topology_reader.hpp"

namespace kvtier::bench {
namespace {

void BM_ReadTopology(benchmark::State& state) {
  const agent::HostPaths paths;
  for (auto _ : state) {  // NOLINT(clang-analyzer-deadcode.DeadStores)
    auto topo = agent::read_topology(paths);
    if (!topo) state.SkipWithError(topo.error().message.c_str());
    benchmark::DoNotOptimize(topo);
  }
}

void BM_RefreshNodeMemory(benchmark::State& state) {
  const agent::HostPaths paths;
  auto topo = agent::read_topology(paths);
  if (!topo) {
    state.SkipWithError(topo.error().message.c_str());
    return;
  }
  for (auto _ : state) {  // NOLINT(clang-analyzer-deadcode.DeadStores)
    auto ok = agent::refresh_node_memory(paths, *topo);
    if (!ok) state.SkipWithError(ok.error().message.c_str());
    benchmark::DoNotOptimize(topo);
  }
  state.counters["nodes"] = static_cast<double>(topo->nodes.size());
}

}  // namespace
}  // namespace kvtier::bench

BENCHMARK(kvtier::bench::BM_ReadTopology)->Unit(benchmark::kMicrosecond)->MinTime(1.0);
BENCHMARK(kvtier::bench::BM_RefreshNodeMemory)->Unit(benchmark::kMicrosecond)->MinTime(1.0);
BENCHMARK_MAIN();
