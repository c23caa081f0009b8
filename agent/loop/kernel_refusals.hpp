#pragma once
// What the kernel refuses kvtierd while it runs (issue 37), as the loop reports
// it, and what kvtierd does instead:
// - a hotness source the kernel will not give (DAMON busy because another user
//   holds every kdamond, a lockdown mode that bars the BPF programs, no BTF):
//   probed at start and at each reload; kvtierd runs with the other sources;
// - pages a move left busy (-EBUSY/-EAGAIN: under writeback, locked, their
//   reference held for a while): they stay, and are planned again once the
//   group's min_residence has passed (the heat table marks a move's whole
//   range moved; the next step reads where its pages really are);
// - a promotion that found no free memory on the fast node (ENOMEM): the hot
//   pages wait on the slow node, as long, while the steps' demotions make room.
// Each is one log line when it begins (a move refusal again after a quiet
// minute), a `degraded` line in `kvtierctl status` while it lasts, and a
// metric: kvtier_source_refused{source}, and the pages in
// kvtier_page_moves_total{status="busy"|"no_memory"}. A demotion that meets a
// full slow node is the mover's node-full latch (move_pages_mover.hpp).

#include <span>
#include <string>
#include <vector>

#include "agent/sources/source_registry.hpp"
#include "agent/telemetry/telemetry.hpp"
#include "policy/types.hpp"

namespace kvtier::agent {

struct SourceRefusal {
  SourceKind kind = SourceKind::kPmu;
  std::string why;
};

// The probed sources the kernel refused (Availability::kernel_refuses).
std::vector<SourceRefusal> kernel_refusals(std::span<const SourceReport> reports);

// One `degraded` line per refused source; `running`: the sources kvtierd runs instead.
void refused_source_lines(std::span<const SourceRefusal> refused, const std::string& running,
                          std::vector<std::string>& out);

// kvtier_source_refused{source} 1 for each refused source, and no sample for the others.
void export_refused_sources(std::span<const SourceRefusal> refused, Telemetry& telemetry);

class MoveRefusals {
 public:
  // A kind of refusal not seen for this long has ended: its next one logs again.
  static constexpr TimeNs kQuiet = TimeNs{60} * 1'000'000'000;

  // One move's result: logs the start of a busy or a promotion-ENOMEM episode.
  void note(const MoveStats& st, Pid pid, int to_node, bool demotion, TimeNs now);
  // The `degraded` lines of the episodes not over at `now`.
  void lines(TimeNs now, std::vector<std::string>& out) const;

 private:
  struct Episode {
    TimeNs first = 0;
    TimeNs last = 0;
    std::uint64_t pages = 0;
    int node = -1;
    // Whether `now` begins a new episode (none yet, or the last one quiet for kQuiet).
    bool begin(std::uint64_t n, int to_node, TimeNs now);
    [[nodiscard]] bool open(TimeNs now) const { return last != 0 && now - last < kQuiet; }
  };
  Episode busy_;
  Episode promotion_full_;
};

}  // namespace kvtier::agent
