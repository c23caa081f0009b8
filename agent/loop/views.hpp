#pragma once
// What the control socket shows of the loop (status, dump, targets, explain,
// heatmap, systemd's STATUS= line): functions of the loop's state and of an
// explicit `now`. None reads the clock or changes anything, so tests call them
// at any time they like.

#include <cstddef>
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "agent/loop/loop_state.hpp"
#include "policy/error.hpp"
#include "policy/types.hpp"

namespace kvtier::agent {

inline constexpr std::size_t kHistoryBins = 64;    // address bins of a heatmap row
inline constexpr std::size_t kHistorySteps = 120;  // rows kept per target

// The loop for `status` (full = false) and `dump` (full: every planned move).
nlohmann::json describe(const LoopState& s, bool full, TimeNs now);
// Whether moves happen: moves and bytes in the last minute, the last one's age.
nlohmann::json activity_json(const LoopState& s, TimeNs now);
// The nodes kvtier demotes to now, those that stopped being demotion targets
// (since how long, why) and the topology changes seen since start.
nlohmann::json topology_json(const LoopState& s, TimeNs now);
// kvtierd's CPU time: the loop thread's by phase (LoopState::cpu) and the process's.
nlohmann::json cpu_json(const LoopState& s);
// What runs short of the configured behaviour, one line each (observe-only, no
// source, a failed source, no process watcher, tiering knobs not set, a lost
// demotion target, a full node lately).
std::vector<std::string> degraded_lines(const LoopState& s, TimeNs now);
// How often the kernel's NUMA scan goes through a target (Target::scan_interval)
// in words: "about every N s", or "less than once an hour".
std::string scan_interval_words(TimeNs interval);
// One line for each target most of whose resident memory is long-term pinned.
std::vector<std::string> pinned_lines(const LoopState& s);
// A few words for systemd's STATUS= line, e.g. "2 targets, 1GiB of 3GiB on CXL, source damon".
std::string summary(const LoopState& s);
// Per target: residency, hot and idle bytes as of `now`, moves.
nlohmann::json targets_json(const LoopState& s, TimeNs now);
// Why each range of `pid` sits where it is: coalesced runs with node, heat,
// idle time and the rule that keeps or moves it (policy::explain_unit).
Result<nlohmann::json> explain(const LoopState& s, Pid pid, TimeNs now);
// Heat over the address space (bins) now and over the last steps.
Result<nlohmann::json> heatmap(const LoopState& s, Pid pid, std::size_t bins, TimeNs now);
// Bytes accessed within their group's effective cold age, by node, over all targets.
std::map<int, std::uint64_t> hot_bytes_per_node(const LoopState& s, TimeNs now);
// The kernel's tiering knobs: what kvtierd changed, any error, their values now.
nlohmann::json tiering_json(const LoopState& s);
// Per group: the effective cold age, the mis-demotion ratio and what was moved and seen.
nlohmann::json feedback_json(const LoopState& s);
// A target's heat per address bin of its tracked mappings (page-weighted mean).
// `cache` (the target's row_cache, the record phase's): a chunk whose pages have
// their own states and have not changed since an earlier row is aged from that
// row's sum instead of walked (the same figure, to the float rounding).
std::vector<float> bin_heat(const Target& t, std::size_t bins, TimeNs now,
                            HeatRowCache* cache = nullptr);

}  // namespace kvtier::agent
