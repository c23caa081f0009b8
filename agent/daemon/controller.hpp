#pragma once
// kvtierd's control loop: one step() discovers the target processes the
// config selects, feeds what the hotness source saw into each target's heat
// table, reads where every page lives, asks the planner what to move and
// hands that to the mover. Every side effect sits behind an injected piece
// (source, mover, page-node query, HostPaths), so tests drive step() with
// fakes and the guest tests drive it for real.

#include <deque>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "agent/daemon/daemon.hpp"
#include "agent/host_paths.hpp"
#include "agent/hotness_source.hpp"
#include "agent/mover.hpp"
#include "agent/movers/move_pages_call.hpp"
#include "policy/budget.hpp"
#include "policy/config.hpp"
#include "policy/heat.hpp"
#include "policy/topology.hpp"

namespace kvtier::agent {

struct ControllerDeps {
  HostPaths paths;
  // Null: no source could run; heat is unknown, so nothing is demoted.
  std::unique_ptr<HotnessSource> source;
  std::string source_reason;
  // Null: observe-only (no demotion target, or no mover wanted).
  std::unique_ptr<Mover> mover;
  std::string observe_reason;
  // move_pages(2) with nodes == nullptr: where each page is.
  MovePagesFn query = system_move_pages();
  // kvtierd's own pid is never a target.
  Pid self = 0;
};

class Controller {
 public:
  Controller(policy::CompiledConfig config, ControllerDeps deps, TimeNs now);
  ~Controller();
  Controller(const Controller&) = delete;
  Controller& operator=(const Controller&) = delete;

  // One iteration; `ctx.paused` plans but moves nothing.
  Result<void> step(const StepContext& ctx, Telemetry& telemetry);
  // A new configuration (already validated). Targets are re-matched at once
  // (new processes join at the next step); a target that stays selected keeps
  // its heat unless its group's half-life changed.
  void apply_config(policy::CompiledConfig config);
  // Detaches the source (BPF programs, DAMON contexts). Idempotent.
  void shutdown();

  [[nodiscard]] nlohmann::json describe(bool full) const;
  [[nodiscard]] std::string summary() const;
  // Per target: residency, hot and idle bytes as of `now`, moves.
  [[nodiscard]] nlohmann::json targets_json(TimeNs now) const;
  // Why each range of `pid` sits where it is: coalesced runs with node, heat,
  // idle time and the rule that keeps or moves it.
  [[nodiscard]] Result<nlohmann::json> explain(Pid pid, TimeNs now) const;
  // Heat over the address space (bins) now and over the last steps.
  [[nodiscard]] Result<nlohmann::json> heatmap(Pid pid, std::size_t bins, TimeNs now) const;
  // Registers targets, explain and heatmap on the control socket.
  void register_commands(Daemon& daemon);

  [[nodiscard]] std::size_t target_count() const { return targets_.size(); }
  [[nodiscard]] const MoveStats& moved_total() const { return moved_total_; }

 private:
  struct Target {
    Pid pid = 0;
    std::size_t group = 0;
    std::string comm;
    std::unique_ptr<policy::HeatTable> heat;
    std::vector<AddrRange> vmas;  // tracked, sorted
    std::map<int, std::uint64_t> bytes_per_node;
    std::uint64_t not_present_bytes = 0;
    MoveStats moved;
    std::vector<PlannedMove> last_moves;
    // Heat per address bin at each step, newest last (for `heatmap`).
    std::deque<std::vector<float>> history;
    bool said_reservations = false;  // logged once that mappings were skipped
  };

  Result<void> discover(TimeNs now);
  void track_vmas(Target& t, TimeNs now);
  void read_residency(Target& t);
  void record_history(Target& t, TimeNs now);
  [[nodiscard]] policy::HeatParams heat_params(std::size_t group) const;
  [[nodiscard]] std::vector<float> bin_heat(const Target& t, std::size_t bins, TimeNs now) const;

  policy::CompiledConfig config_;
  ControllerDeps deps_;
  policy::TokenBucket bucket_;
  policy::Topology topology_;
  std::map<Pid, Target> targets_;
  bool source_started_ = false;
  // apply_config() dropped targets: the source must hear of it.
  bool targets_changed_ = false;
  std::string source_error_;
  MoveStats moved_total_;
  Plan last_plan_;
  std::uint64_t steps_ = 0;
  std::vector<void*> addrs_;
  std::vector<int> status_;
};

}  // namespace kvtier::agent
