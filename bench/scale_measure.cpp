// kvtier_scale_bench: the figures both runs take the same way (scale_bench.hpp).

#include <fmt/format.h>
#include <unistd.h>

#include <cstdint>
#include <fstream>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>

#include "agent/host/clock.hpp"
#include "agent/host/residency.hpp"
#include "agent/loop/loop_state.hpp"
#include "bench/scale_bench.hpp"
#include "policy/config.hpp"
#include "policy/planner.hpp"
#include "policy/types.hpp"

namespace kvtier::bench {
namespace {

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

}  // namespace

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

policy::CompiledConfig compiled() {
  auto cc = policy::compile_config_text(kConfig, "scale_bench.toml");
  if (!cc) throw std::logic_error("scale_bench.toml: " + cc.error().front().to_string());
  return std::move(*cc);
}

agent::MovePagesFn counted(agent::MovePagesFn query, std::uint64_t* asked) {
  if (asked == nullptr) return query;
  return [query = std::move(query), asked](Pid pid, std::span<void*> pages, const int* nodes,
                                           std::span<int> status, int flags) {
    *asked += pages.size();
    return query(pid, pages, nodes, status, flags);
  };
}

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

TimeNs time_full_read(const agent::LoopState& st, agent::ResidencyReader reader) {
  const TimeNs a = agent::thread_cpu_now();
  for (const auto& [pid, t] : st.targets.all()) (void)reader.map(pid, t.vmas);
  return agent::thread_cpu_now() - a;
}

}  // namespace kvtier::bench
