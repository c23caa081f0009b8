// kvtierctl commands answered by the running daemon over its control socket.

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "agent/ctl/ask.hpp"
#include "agent/ctl/command.hpp"
#include "agent/ctl/status_report.hpp"
#include "policy/units.hpp"

namespace kvtier::agent::ctl {
namespace {

using nlohmann::json;

std::string duration_text(double seconds) {
  auto s = static_cast<std::uint64_t>(seconds);
  if (s < 60) return fmt::format("{}s", s);
  if (s < 3600) return fmt::format("{}m{:02}s", s / 60, s % 60);
  if (s < 86400) return fmt::format("{}h{:02}m", s / 3600, (s % 3600) / 60);
  return fmt::format("{}d{:02}h", s / 86400, (s % 86400) / 3600);
}

// One line per group: the placement feedback (docs/operate.md, loop.placement).
// Who promotes a demoted page at its first access: kvtierd (the return watch
// wakes it; hot_threshold_ms 0) or the kernel in the workload's fault path.
void print_promotion(const json& t) {
  const json w = t.value("return_watch", json());
  const json th = t.value("hot_threshold_ms", json());
  if (!w.is_object() && !th.is_number()) return;
  const std::string watch = w.is_object()
                                ? fmt::format("return watch: {} touches of {} chunks armed",
                                              get_or<std::uint64_t>(w, "returns", 0),
                                              get_or<std::uint64_t>(w, "armed", 0))
                                : std::string("no return watch");
  if (th.is_number() && th.get<std::uint64_t>() == 0) {
    fmt::print("  {:<11} by kvtierd, out of the workload's fault path ({})\n", "promotion", watch);
  } else if (th.is_number()) {
    fmt::print("  {:<11} in the workload's fault path (hot_threshold_ms {}; {})\n", "promotion",
               th.get<std::uint64_t>(), watch);
  }
}

// The `groups` line: promotion by co-access group, and whether it switched itself off.
void print_group_promotion(const json& g) {
  const json gp = g.value("group_promotion", json::object());
  if (!gp.is_object() || gp.empty()) return;
  const auto bytes = [&](const char* key) {
    return policy::format_size(get_or<std::uint64_t>(gp, key, 0));
  };
  if (!get_or(gp, "enabled", false)) {
    fmt::print("  {:<11} group {}: promotion by co-access group off (promote_groups = false)\n",
               "groups", get_or<std::string>(g, "group", "?"));
    return;
  }
  const bool on = get_or(gp, "on", true);
  fmt::print(
      "  {:<11} group {}: {} co-access groups ({}); promoted by group {}, {:.0f}% hit of {} "
      "judged lately ({} hit, {} wasted){}\n",
      "groups", get_or<std::string>(g, "group", "?"), get_or<std::uint64_t>(gp, "groups", 0),
      bytes("memory_bytes"), bytes("promoted_bytes"), 100.0 * get_or(gp, "hit_rate", 1.0),
      get_or<std::uint64_t>(gp, "judged", 0), bytes("hit_bytes"), bytes("wasted_bytes"),
      on ? ""
         : fmt::format("; switched itself off: below group_hit_rate_min {:.0f}%, trials go on "
                       "without moving anything",
                       100.0 * get_or(gp, "hit_rate_min", 0.0)));
}

void print_placement(const json& loop) {
  for (const auto& g : loop.value("placement", json::array())) {
    const auto bytes = [&](const char* key) {
      return policy::format_size(get_or<std::uint64_t>(g, key, 0));
    };
    fmt::print(
        "  {:<11} group {}: cold age {}, mis-demoted {:.1f}% of {} lately; demoted {}, promoted "
        "{} (kernel {}), slow-tier touches {}\n",
        "placement", get_or<std::string>(g, "group", "?"),
        duration_text(get_or(g, "effective_cold_age_s", 0.0)),
        100.0 * get_or(g, "misdemotion_ratio", 0.0), bytes("window_demoted_bytes"),
        bytes("demoted_bytes"), bytes("promoted_bytes"), bytes("kernel_promoted_bytes"),
        get_or<std::uint64_t>(g, "slow_tier_touches", 0));
    print_group_promotion(g);
  }
  std::map<std::string, std::uint64_t> hot;
  for (const auto& target : loop.value("targets", json::array())) {
    const json per_node = target.value("hot_bytes_per_node", json::object());
    for (const auto& [node, bytes] : per_node.items()) {
      if (bytes.is_number_unsigned()) hot[node] += bytes.get<std::uint64_t>();
    }
  }
  std::string hot_text;
  for (const auto& [node, bytes] : hot) {
    hot_text +=
        fmt::format("{}node {} {}", hot_text.empty() ? "" : ", ", node, policy::format_size(bytes));
  }
  fmt::print("  {:<11} {}\n", "hot", hot_text.empty() ? "none" : hot_text);
  const json t = loop.value("tiering", json::object());
  if (auto err = get_or<std::string>(t, "error", ""); !err.empty()) {
    fmt::print("  {:<11} not set: {}\n", "tiering", err);
  } else if (t.contains("tiering_mode")) {
    fmt::print("  {:<11} NUMA balancing tiering mode {}, {} knob(s) changed by kvtierd\n",
               "tiering", get_or(t, "tiering_mode", false) ? "on" : "off",
               t.value("changed", json::array()).size());
  }
  print_promotion(t);
}

// The nodes kvtierd demotes to now (read every step), and how many times the
// topology changed under it.
void print_demotion_targets(const json& topo) {
  if (!topo.contains("demotion_targets")) return;
  std::string nodes;
  for (const auto& n : topo["demotion_targets"]) {
    if (n.is_number_integer())
      nodes += fmt::format("{}{}", nodes.empty() ? "" : ", ", n.get<int>());
  }
  const auto changes = get_or<std::uint64_t>(topo, "changes", 0);
  fmt::print(
      "  {:<11} {}{}\n", "demote to", nodes.empty() ? "no node now" : "node " + nodes,
      changes == 0 ? std::string() : fmt::format(" ({} topology changes since start)", changes));
}

// What runs (sources and mover, and why), whether moves happen, and what is
// degraded: what an operator asks first.
void print_loop(const json& loop) {
  std::string sources;
  for (const auto& src : loop.value("sources", json::array())) {
    const std::string standby = get_or<std::string>(src, "standby", "");
    sources += fmt::format(
        "{}{} ({})", sources.empty() ? "" : "; ", get_or<std::string>(src, "name", "?"),
        standby.empty() ? get_or<std::string>(src, "reason", "") : "stands by: " + standby);
  }
  fmt::print("  {:<11} {}\n", "sources", sources.empty() ? "none" : sources);
  const std::string mover = get_or<std::string>(loop, "mover", "");
  fmt::print("  {:<11} {}\n", "mover",
             mover.empty() ? "none (observe-only)"
                           : mover + (mover == "dry-run" ? " (mover.kind: plans, moves nothing)"
                                                         : " (mover.kind)"));
  print_demotion_targets(loop.value("topology", json::object()));
  const json disc = loop.value("discovery", json::object());
  if (auto how = get_or<std::string>(disc, "how", ""); !how.empty()) {
    fmt::print("  {:<11} found by {}\n", "targets", how);
  }
  const json act = loop.value("activity", json::object());
  const json ago = act.value("last_move_seconds_ago", json(nullptr));
  fmt::print("  {:<11} {} in the last minute ({}), {}\n", "moves",
             get_or<std::uint64_t>(act, "moves_last_minute", 0),
             policy::format_size(get_or<std::uint64_t>(act, "moved_bytes_last_minute", 0)),
             ago.is_number() ? "last " + duration_text(ago.get<double>()) + " ago"
                             : std::string("none yet"));
  for (const auto& line : loop.value("degraded", json::array())) {
    if (line.is_string()) fmt::print("  {:<11} {}\n", "degraded", line.get<std::string>());
  }
  for (const auto& line : loop.value("pinned", json::array())) {
    if (line.is_string()) fmt::print("  {:<11} {}\n", "pinned", line.get<std::string>());
  }
}

// Where kvtierd's CPU went (docs/operate.md, loop.cpu): the whole process, and
// the control loop's thread by phase, largest first.
void print_cpu(const json& loop, double uptime) {
  const json cpu = loop.value("cpu", json::object());
  if (!cpu.contains("process_seconds")) return;
  const double total = get_or(cpu, "process_seconds", 0.0);
  std::vector<std::pair<double, std::string>> phases;
  const auto by_phase = cpu.find("loop_seconds_by_phase");
  if (by_phase != cpu.end() && by_phase->is_object()) {
    for (const auto& [name, sec] : by_phase->items()) {
      if (sec.is_number()) phases.emplace_back(sec.get<double>(), name);
    }
  }
  std::ranges::sort(phases, std::greater<>());
  std::string parts;
  for (const auto& [sec, name] : phases) {
    parts += fmt::format("{}{} {:.1f}s", parts.empty() ? "" : ", ",
                         name == "move" ? "moving pages" : name, sec);
  }
  fmt::print("  {:<11} {:.1f}s since start ({:.1f}% of a CPU); loop thread {:.1f}s: {}\n", "cpu",
             total, uptime > 0 ? 100.0 * total / uptime : 0.0, get_or(cpu, "loop_seconds", 0.0),
             parts.empty() ? "none yet" : parts);
}

// kvtierd's own resident memory (loop.memory): it lives in the DRAM it manages.
void print_memory(const json& loop) {
  const json mem = loop.value("memory", json::object());
  if (!mem.contains("resident_bytes")) return;
  fmt::print("  {:<11} {} resident\n", "memory",
             policy::format_size(get_or<std::uint64_t>(mem, "resident_bytes", 0)));
}

void print_reloads(const json& st) {
  const json last = st.value("last_reload", json(nullptr));
  std::string when;
  if (last.is_object()) {
    when = fmt::format(", last {} ago, {}", duration_text(get_or(last, "seconds_ago", 0.0)),
                       get_or(last, "applied", false) ? "applied" : "rejected");
  }
  fmt::print("  {:<11} {} ({} rejected){}\n", "reloads", get_or<std::uint64_t>(st, "reloads", 0),
             get_or<std::uint64_t>(st, "reloads_rejected", 0), when);
  for (const auto& e : st.value("last_reload_errors", json::array())) {
    if (e.is_string()) fmt::print("  {:<11} {}\n", "rejected", e.get<std::string>());
  }
}

}  // namespace

void print_status(const json& st) {
  const bool paused = get_or(st, "paused", false);
  fmt::print("kvtierd {} (pid {}), up {}, {}\n", get_or<std::string>(st, "version", "?"),
             get_or(st, "pid", 0), duration_text(get_or(st, "uptime_seconds", 0.0)),
             paused ? "PAUSED: no pages move until `kvtierctl resume`" : "active");
  const json loop = st.value("loop", json::object());
  print_loop(loop);
  fmt::print("  {:<11} {} ({} failed), every {} ms, last took {:.2f} ms\n", "steps",
             get_or<std::uint64_t>(st, "steps", 0), get_or<std::uint64_t>(st, "step_errors", 0),
             get_or(st, "interval_ms", 0), get_or(st, "last_step_ms", 0.0));
  if (auto err = get_or<std::string>(st, "last_step_error", ""); !err.empty()) {
    fmt::print("  {:<11} {}\n", "last error", err);
  }
  print_placement(loop);
  print_cpu(loop, get_or(st, "uptime_seconds", 0.0));
  print_memory(loop);
  print_reloads(st);
  fmt::print("  {:<11} {}\n", "socket", get_or<std::string>(st, "socket", "?"));
  const json prom = st.value("prometheus", json::object());
  if (get_or(prom, "enabled", false)) {
    fmt::print("  {:<11} http://{}/metrics (port {})\n", "prometheus",
               get_or<std::string>(prom, "listen", "?"), get_or(prom, "port", 0));
  } else {
    fmt::print("  {:<11} off\n", "prometheus");
  }
}

void add_daemon_commands(CLI::App& app, Globals& g) {
  {
    auto json_out = std::make_shared<bool>(false);
    auto* cmd =
        app.add_subcommand("status",
                           "Show whether kvtierd runs, its sources and mover and why, whether "
                           "pages move, what is degraded, steps, placement feedback, tiering "
                           "knobs, reloads and endpoints");
    cmd->add_flag("--json", *json_out, "Print the daemon's answer as JSON");
    cmd->callback([&g, json_out] {
      ask(g, "status", "status", [&](const json& st) {
        if (*json_out) {
          std::cout << st.dump(2) << '\n';
        } else {
          print_status(st);
        }
      });
    });
  }
  {
    auto compact = std::make_shared<bool>(false);
    auto json_flag = std::make_shared<bool>(true);
    auto* cmd = app.add_subcommand(
        "dump",
        "Print everything kvtierd knows as JSON (status, settings, telemetry, the loop's "
        "state), for scripts");
    // JSON is the only format; --json is accepted so scripts can say what they expect.
    cmd->add_flag("--json", *json_flag, "Print JSON (the default and only format)");
    cmd->add_flag("--compact", *compact, "One line instead of indented JSON");
    // json_flag is captured to keep it alive: CLI11 writes through the pointer
    // when --json is given (it was freed here before; AddressSanitizer found it).
    cmd->callback([&g, compact, json_flag] {
      ask(g, "dump", "dump",
          [&](const json& d) { std::cout << (*compact ? d.dump() : d.dump(2)) << '\n'; });
    });
  }
  for (const bool pause : {true, false}) {
    const std::string name = pause ? "pause" : "resume";
    auto* cmd = app.add_subcommand(
        name, pause ? "Stop moving pages (heat is still measured) until `kvtierctl resume`"
                    : "Move pages again after `kvtierctl pause`");
    cmd->callback([&g, name, pause] {
      ask(g, name, name, [&](const json& r) {
        const bool changed = get_or(r, "changed", false);
        if (pause) {
          fmt::print("{}\n",
                     changed ? "paused: no pages move until `kvtierctl resume`" : "already paused");
        } else {
          fmt::print("{}\n", changed ? "resumed: pages move again" : "not paused");
        }
      });
    });
  }
}

}  // namespace kvtier::agent::ctl
