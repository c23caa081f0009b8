#pragma once
// kvtier's configuration: plain structs parsed from TOML (parse_config), then
// validated and compiled into runtime objects (compile_config). kvtierd and
// `kvtierctl config check` run the very same two steps. Every problem is
// collected, never just the first one, and every unknown key is an error.
// docs/configuration.md documents every key; the defaults below are the
// documented ones.

#include <cstdint>
#include <expected>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "policy/topology.hpp"
#include "policy/types.hpp"
#include "policy/units.hpp"

namespace re2 {
class RE2;
}

namespace kvtier::policy {

// What the parser accepts before toml++ sees the text: a config is written by
// root, but a file that is too large or nested too deep must cost one line,
// never a crash (toml++ recurses once per nesting level and per dotted key part).
inline constexpr std::size_t kMaxConfigBytes = std::size_t{256} << 10;
inline constexpr int kMaxConfigDepth = 32;
// At most this much of /proc/PID/cmdline is read and matched: any local user
// controls the text, so its length must not be.
inline constexpr std::size_t kMaxCmdlineBytes = std::size_t{16} << 10;
// Problem lines kvtierd logs, keeps for `status` and `config check` prints;
// the rest are counted in one last line.
inline constexpr std::size_t kMaxProblemLines = 20;

// One thing wrong with a config file, printed as FILE:LINE: KEY.PATH: MESSAGE,
// where MESSAGE says what is wrong and what is allowed.
struct ConfigProblem {
  std::string file;
  int line = 0;  // 1-based; 0 when the file could not be read at all
  std::string key;
  std::string message;

  // Control characters are escaped and a very long line is cut in the middle,
  // so one problem is always one readable line.
  [[nodiscard]] std::string to_string() const;
};
using ConfigProblems = std::vector<ConfigProblem>;

// One line per problem, at most `max_lines`: past that the last line says how
// many more there are.
std::vector<std::string> problem_lines(const ConfigProblems& problems,
                                       std::size_t max_lines = kMaxProblemLines);

struct DaemonConfig {
  TimeNs interval = 5 * kNsPerSec;  // one collect -> plan -> move cycle
  // Between steps: collect page-level evidence and promote what was accessed on a
  // slow node (nothing else planned); nullopt: off.
  std::optional<TimeNs> promote_interval = 1 * kNsPerSec;
  // How soon after the first touch of memory kvtier demoted (the faults source's
  // return watch) the promotion tick runs, gathering the touches that follow;
  // nullopt: it waits for promote_interval.
  std::optional<TimeNs> promote_wake = 5 * kNsPerMs;
  // How long the promotion tick may wait for a CPU that nothing else wants (it
  // runs at SCHED_IDLE: between the workload's passes, or on an idle CPU) before
  // it runs at kvtierd's own priority; nullopt: it runs at once.
  std::optional<TimeNs> promote_yield;
  // Always-on recording (docs/recording.md): kvtierd records every step into a
  // new file at this path from start-up ("" : only on `kvtierctl record start`).
  // The file must not exist yet; the recording stops at either limit.
  std::string record;
  std::uint64_t record_max_bytes = 64ULL << 20;
  TimeNs record_max_duration = 3600 * kNsPerSec;
};

enum class LogLevel : std::uint8_t { kTrace, kDebug, kInfo, kWarn, kError, kOff };

struct LoggingConfig {
  LogLevel level = LogLevel::kInfo;
};

struct TelemetryConfig {
  std::string socket = "/run/kvtier/kvtierd.sock";
  std::uint32_t socket_mode = 0660;
  std::string socket_group = "kvtier";
  bool prometheus = false;
  std::string prometheus_listen = "127.0.0.1:9464";
  // A pod's own network namespace has no scraper on its loopback (deploy/kubernetes).
  bool prometheus_allow_non_loopback = false;
};

struct SourcesConfig {
  // Run together, each one the host supports (kvtierd and `kvtierctl sources`
  // both start from this default), each for what it sees well: page-level
  // evidence (pmu, faults: NUMA hint faults on slow-tier pages) confirms, vetoes
  // and promotes; DAMON regions tell what stays in use in DRAM. pmu-soft (the
  // software page-faults event) and idle (page_idle scans) are left out: they
  // see what faults and DAMON see at a higher cost; name them to use them.
  std::vector<SourceKind> use = {SourceKind::kPmu, SourceKind::kFault, SourceKind::kDamon,
                                 SourceKind::kSoftDirty};
  std::optional<SourceKind> force;     // run exactly this source, fail if unavailable
  std::uint64_t sample_period = 1000;  // pmu, pmu-soft: events per sample
  // pmu, pmu-soft: sample budget, all targets together; checked at each
  // collect(), where the period grows to meet it (not an in-kernel cap).
  std::uint64_t max_samples_per_sec = 20000;
  // DAMON over the tracked mappings; nullopt: "auto", sized by the daemon from
  // the groups' cold_age and the memory tracked (agent/sources/damon_sizing.hpp).
  std::optional<TimeNs> damon_sample_interval;
  std::optional<TimeNs> damon_aggr_interval;
  std::optional<std::uint32_t> damon_min_regions;
  std::optional<std::uint32_t> damon_max_regions;
  TimeNs idle_scan_interval = 10 * kNsPerSec;
  // dirty: at most one pagemap scan and soft-dirty reset per this much time.
  TimeNs dirty_scan_interval = kNsPerSec;
  // dirty runs even while the faults source sees NUMA hint faults (or pmu runs);
  // false: it stands by then, since each scan makes every write of the workload
  // fault, and the writes it finds on the slow node fault there anyway.
  bool dirty_beside_faults = false;
};

struct LimitsConfig {
  std::uint64_t migrate_rate = 256ULL << 20;   // bytes per second, token bucket refill
  std::uint64_t migrate_burst = 256ULL << 20;  // bytes, token bucket depth
  double cxl_fill_max = 0.9;                   // share of a demotion node kvtier may fill
  std::uint64_t min_free = 16ULL << 20;        // bytes left free on any node kvtier moves to
  // Share of each DRAM node kept free for promotions (the kernel's in the fault
  // path and kvtier's own): demote coldest first, anything idle for cold_age, to
  // keep it; kvtier's own promotions leave half of it.
  double dram_headroom = 0.03;
};

// A hot threshold so long that every NUMA hint fault on a slow-tier page promotes
// it: kvtier judges coldness itself, so the first access after a demotion is
// reason enough (the kernel's default of 1 s waits for a second fault).
inline constexpr TimeNs kPromoteOnFirstAccess = 3600 * kNsPerSec;
// A hot threshold of 0: no hint fault promotes in the fault path (unless the
// DRAM node has ample free memory: then the kernel promotes whatever the
// threshold); kvtierd promotes, from its own thread, what its return watch
// sees touched (agent/sources/return_watch.hpp).
inline constexpr TimeNs kPromoteByKvtier = 0;
// "auto": kPromoteByKvtier while the faults source's return watch runs, else
// kPromoteOnFirstAccess. Resolved when [tiering] is applied.
inline constexpr TimeNs kPromoteAuto = ~TimeNs{0};

// The kernel's memory-tiering knobs kvtierd sets at start and puts back when it
// stops (agent/host/numa_tiering.hpp); nullopt leaves a knob as the host has it.
enum class NumaBalancingMode : std::uint8_t { kKeep, kTiering, kTieringOnly };

struct TieringConfig {
  // What to OR into kernel.numa_balancing. kTiering (bits 1|2): the kernel
  // unmaps pages now and then, so accesses fault (NUMA hint faults); on a slow
  // node the fault may promote. kTieringOnly (bit 2): only slow-tier pages are
  // unmapped. kKeep: the host's value stays.
  NumaBalancingMode numa_balancing = NumaBalancingMode::kTiering;
  // hot_threshold_ms: a hint fault promotes its page in the fault path if the page
  // was unmapped less than this long ago.
  std::optional<TimeNs> promote_threshold = kPromoteAuto;
  // scan_period_min_ms / scan_period_max_ms: how often a task's slow-tier pages
  // are unmapped, in the task's own CPU time. Equal, so the kernel cannot
  // lengthen the period (docs/configuration.md says why it would).
  std::optional<TimeNs> scan_period_min = 100 * kNsPerMs;
  std::optional<TimeNs> scan_period_max = 100 * kNsPerMs;
  // scan_size_mb: how much a scan unmaps at most. The kernel keeps a task's scans
  // under 2560 MB per second of its CPU time by flooring the period at
  // scan_size / 2560 MB of CPU time (100 ms at its default 256 MB), so a smaller
  // size lets a task that uses little CPU be scanned more often, for the same work.
  std::optional<std::uint64_t> scan_size = 32ULL << 20;
  // numa_balancing_promote_rate_limit_MBps (bytes/s; the kernel's unit is MB/s):
  // at most this much a second is promoted in hint faults' fault paths, where the
  // copy runs in the faulting thread (the workload's time); beyond it the kernel
  // leaves pages where they are and kvtier promotes them from its own thread at
  // its next promotion tick. nullopt: the host's value (65536 MB/s by default).
  std::optional<std::uint64_t> promote_rate_limit;
  // NUMA hint faults a second, host-wide (/proc/vmstat numa_hint_faults), that
  // kvtierd lets the kernel's scan raise: each costs the faulting thread a fault
  // and kvtierd a sample. The scan runs once per scan_period of a process's own
  // CPU time, so a busy server is scanned far more often than one that waits;
  // above this rate kvtierd lengthens both scan periods in proportion (up to
  // kMaxPacedScanPeriod), and below a quarter of it shortens them back toward
  // the configured ones. 0: no budget.
  std::uint64_t max_hint_faults_per_sec = 5000;
};
inline constexpr TimeNs kMaxPacedScanPeriod = 60 * kNsPerSec;
// Above this the kernel's default, 65536 MB/s, already means "no limit".
inline constexpr std::uint64_t kTieringMaxPromoteRate = 65536ULL << 20;
// The kernel's MAX_SCAN_WINDOW: a larger scan_size_mb only lengthens the period floor.
inline constexpr std::uint64_t kTieringMaxScanSize = 2560ULL << 20;

enum class MoverKind : std::uint8_t { kMovePages, kDryRun };

struct MoverConfig {
  MoverKind kind = MoverKind::kMovePages;
  std::uint32_t batch_pages = 1024;  // pages per move_pages(2) call
};

// A process belongs to a group when ANY of its selectors matches.
struct Selector {
  std::vector<std::string> comm;  // RE2 regex searched in /proc/PID/comm
  std::vector<std::string>
      cmdline;                      // RE2 regex searched in the cmdline, arguments joined by spaces
  std::vector<std::string> exe;     // exact absolute path of /proc/PID/exe
  std::vector<std::string> cgroup;  // cgroup v2 path; the cgroup and everything below it
  std::vector<Pid> pid;

  [[nodiscard]] bool empty() const {
    return comm.empty() && cmdline.empty() && exe.empty() && cgroup.empty() && pid.empty();
  }
};

struct GroupPolicy {
  // Idle this long at least before anything is demoted; nullopt: cold-age demotion
  // off. Mis-demotions raise the effective cold age above it, up to cold_age_max.
  std::optional<TimeNs> cold_age = 10 * kNsPerSec;
  TimeNs cold_age_max = 600 * kNsPerSec;
  // Share of demoted bytes accessed again within cold_age that raises the
  // effective cold age (a quarter of it lowers it again).
  double misdemotion_target = 0.05;
  TimeNs half_life = 10 * kNsPerSec;        // heat decay
  bool promote = true;                      // promotion of accessed slow-tier pages on/off
  double promote_heat = 2.0;                // also promote anything this hot (accesses/s/page)
  double demote_heat = 0.5;                 // never demote anything hotter
  TimeNs min_residence = 10 * kNsPerSec;    // a page moved to DRAM stays at least this long
  std::optional<std::uint64_t> dram_limit;  // bytes of the group on DRAM nodes, at most
  std::optional<std::uint64_t> keep_free;   // bytes to keep free on each DRAM node
  std::vector<AddrRange> exclude;           // never moved
  // Promotion by co-access group (policy/coaccess.hpp): on/off (off until the
  // benchmark shows it pays), and the hit rate below which it switches itself
  // off (its trials go on without moving).
  bool promote_groups = false;
  double group_hit_rate_min = 0.9;
};

struct GroupConfig {
  std::string name;
  int priority = 0;                  // higher: promoted first, demoted last
  std::optional<int> demotion_node;  // nullopt: "auto" (preferred_demotion_target)
  Selector select;
  GroupPolicy policy;
};

struct Config {
  std::string file;  // where it was read from, for messages
  DaemonConfig daemon;
  LoggingConfig logging;
  TelemetryConfig telemetry;
  SourcesConfig sources;
  LimitsConfig limits;
  TieringConfig tiering;
  MoverConfig mover;
  std::vector<GroupConfig> groups;
  // Full key path ("group[0].demotion_node") -> line, for problems found after parsing.
  std::map<std::string, int> lines;

  [[nodiscard]] int line_of(const std::string& key) const;
};

// TOML text -> Config. Reports every syntax, type, range, unknown-key and
// consistency problem it finds.
std::expected<Config, ConfigProblems> parse_config(std::string_view text, std::string_view file);
// Reads `path` (a regular file of at most kMaxConfigBytes) and parses it.
std::expected<Config, ConfigProblems> load_config(const std::string& path);

// What the daemon knows about a process when it decides whether to manage it.
struct ProcessInfo {
  Pid pid = 0;
  std::string comm;
  std::string cmdline;  // arguments joined by single spaces
  std::string exe;
  std::string cgroup;  // cgroup v2 path from /proc/PID/cgroup ("/system.slice/x.service")
};

// A selector with its regexes compiled. RE2 matches in time linear in the
// text, whatever the pattern: a process name cannot stall the daemon.
class TargetMatcher {
 public:
  static std::expected<TargetMatcher, std::string> compile(const Selector& s);
  [[nodiscard]] bool matches(const ProcessInfo& p) const;

 private:
  std::vector<std::shared_ptr<const re2::RE2>> comm_;
  std::vector<std::shared_ptr<const re2::RE2>> cmdline_;
  std::vector<std::string> exe_;
  std::vector<std::string> cgroup_;
  std::vector<Pid> pid_;
};

struct CompiledGroup {
  std::size_t index = 0;  // position in Config::groups (the planner's group index)
  TargetMatcher matcher;
};

// The runtime form: matchers compiled, groups in match order (priority
// descending, then file order), nodes checked against a topology when given.
struct CompiledConfig {
  Config config;
  std::vector<CompiledGroup> match_order;

  // The group a process belongs to: the highest-priority group that selects it.
  [[nodiscard]] std::optional<std::size_t> group_of(const ProcessInfo& p) const;
};

// Validation that needs more than the file: regexes compile, explicit
// demotion nodes exist and have memory in `topo` (skipped when null).
std::expected<CompiledConfig, ConfigProblems> compile_config(Config config,
                                                             const Topology* topo = nullptr);

// What kvtierd and `kvtierctl config check` run: parse, then compile what could
// be parsed, so problems of both steps are reported together, sorted by line.
std::expected<CompiledConfig, ConfigProblems> compile_config_text(std::string_view text,
                                                                  std::string_view file,
                                                                  const Topology* topo = nullptr);
std::expected<CompiledConfig, ConfigProblems> load_compiled_config(const std::string& path,
                                                                   const Topology* topo = nullptr);

// The DAMON intervals kvtierd uses: the config's, and for "auto" a sample every
// tenth of the shortest cold_age of the groups (10 s when none has one) and an
// aggregation every half of it: a page used once a second is then seen at every
// check, and idle time is known to half a cold age.
struct DamonIntervalsNs {
  TimeNs sample = 0;
  TimeNs aggr = 0;
};
DamonIntervalsNs damon_intervals(const Config& c);

// What a reload (SIGHUP) from `running` to `next` cannot apply: the keys that
// changed and need a restart, as "section.key" (the control socket's path,
// mode and group: re-creating it would cut off its clients; [mover]: the
// mover holds moves in flight and what it learned of full nodes).
std::vector<std::string> keys_needing_restart(const Config& running, const Config& next);
// Whether the hotness sources must be rebuilt: any [sources] key, or DAMON's
// "auto" intervals (which follow the groups' cold_age), changed.
bool sources_changed(const Config& running, const Config& next);

std::string_view source_name(SourceKind s);
// The kind a name stands for ("pmu", "pmu-soft", "faults", "damon", "idle",
// "dirty").
std::optional<SourceKind> source_kind(std::string_view name);
std::string_view mover_name(MoverKind m);
std::string_view log_level_name(LogLevel l);

}  // namespace kvtier::policy
