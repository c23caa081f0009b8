#pragma once
// kvtier_scale_bench's parts (bench/scale_bench.cpp says what it measures): what
// one size measured (Figures), the steady-state steps and the figures both runs
// take the same way (scale_measure.cpp), the synthetic run over the generator
// (scale_synthetic.cpp) and the real run on this host (scale_real.cpp).

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <string_view>
#include <utility>

#include "agent/host/residency.hpp"
#include "agent/loop/controller.hpp"
#include "agent/loop/loop_state.hpp"
#include "agent/movers/mover.hpp"
#include "agent/telemetry/telemetry.hpp"
#include "bench/scale_generator.hpp"
#include "policy/config.hpp"
#include "policy/types.hpp"

namespace kvtier::bench {

inline constexpr TimeNs kInterval = 5 * kSec;
inline constexpr std::uint64_t kMiB = 1ULL << 20;
inline constexpr std::uint64_t kGiB = 1ULL << 30;

// What one size measured.
struct Figures {
  std::uint64_t tracked = 0;      // bytes
  std::uint64_t rss = 0;          // resident bytes the loop added
  std::uint64_t heat = 0;         // HeatTable::memory_bytes, all targets
  agent::LoopCpu cpu{};           // per step, mean
  TimeNs step_cpu = 0;            // per step, mean, all phases
  TimeNs later_cpu = 0;           // per step, mean, all phases, of the steps after the first
  TimeNs check_residency = 0;     // the residency phase of the step with the 30 s check
  TimeNs full_read = 0;           // a read of every tracked page's node (the check's predecessor)
  std::uint64_t asked = 0;        // pages the residency reader has asked the query about
  std::uint64_t check_asked = 0;  // of them, in the step with the check
  TimeNs plan = 0;                // policy::plan alone, the fastest of 3
  std::uint64_t samples = 0;      // per step
  std::uint64_t moves = 0;        // pages the steady state's plans asked to move
  std::string problem;            // the mechanics disagreed
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

// This process's resident bytes, and the machine's MemAvailable.
std::uint64_t rss_bytes();
std::uint64_t mem_available();
inline double ms(TimeNs t) {
  return static_cast<double>(t) / 1e6;
}

// The config is the bench's own: a mistake in it is the bench's bug.
policy::CompiledConfig compiled();

// `query`, counting the pages it is asked about into `*asked` (if not null).
agent::MovePagesFn counted(agent::MovePagesFn query, std::uint64_t* asked);

// policy::plan over the loop's state as the controller's plan phase sees it.
TimeNs time_plan(const agent::LoopState& st, TimeNs now);

// What the residency phase cost every 30 s before issue 33's check: every tracked page's
// node read (ResidencyReader::map over the mappings), all targets.
TimeNs time_full_read(const agent::LoopState& st, agent::ResidencyReader reader);

// Runs `steps` steady-state steps and fills the figures common to both modes.
// `before_step(now)` prepares each step's evidence; `reader` is the loop's residency
// reader's twin, for time_full_read.
template <class Before>
void measure_steps(agent::Controller& ctl, agent::Telemetry& tel, int steps, TimeNs first,
                   TimeNs interval, Before&& before_step, Figures& f,
                   agent::ResidencyReader reader) {
  const agent::LoopCpu start = ctl.state().cpu;
  agent::LoopCpu first_end = start;  // after the first step (the 30 s check's)
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
      first_end = ctl.state().cpu;
      const auto r = static_cast<std::size_t>(agent::LoopPhase::kResidency);
      f.check_residency = ctl.state().cpu[r] - pre[r];
      f.check_asked = f.asked - asked;
    }
  }
  for (std::size_t i = 0; i < agent::kLoopPhases; ++i) {
    f.cpu[i] = (ctl.state().cpu[i] - start[i]) / steps;
    f.step_cpu += f.cpu[i];
    if (steps > 1) f.later_cpu += (ctl.state().cpu[i] - first_end[i]) / (steps - 1);
  }
  f.plan = time_plan(ctl.state(), now);
  f.full_read = time_full_read(ctl.state(), std::move(reader));
  (void)interval;
  for (const auto& [pid, t] : ctl.state().targets.all()) {
    f.tracked += t.heat->tracked_bytes();
    f.heat += t.heat->memory_bytes();
  }
}

// The synthetic run (scale_synthetic.cpp): N processes' KV pools from the generator.
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
  // Each sequence's kind drawn on its own (the generator up to 2026-12-07's 24th note): the
  // shares hold only on average (scale_generator.hpp).
  bool drawn_shares = false;
};

Figures run_synthetic(const Synthetic& o, const std::filesystem::path& dir);

// The real run (scale_real.cpp): a child with `size` of anonymous memory, the live sources.
// `skipped`: why the run could not be made (the figures are then empty).
Figures run_real(std::uint64_t size, int steps, double hot_share, std::string* skipped);

}  // namespace kvtier::bench
