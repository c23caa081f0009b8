// kvtierctl commands about the control loop's view: targets, top, explain and
// heatmap, all answered by kvtierd over its control socket.

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <fstream>
#include <iostream>
#include <memory>
#include <string>
#include <string_view>
#include <thread>

#include "agent/ctl/ask.hpp"
#include "agent/ctl/command.hpp"
#include "policy/error.hpp"
#include "policy/units.hpp"

namespace kvtier::agent::ctl {
namespace {

using nlohmann::json;

std::string size_text(const json& j, const char* key) {
  return policy::format_size(get_or<std::uint64_t>(j, key, 0));
}

void print_targets(const json& targets) {
  fmt::print("{:>7} {:<16} {:<12} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10}\n", "PID",
             "COMM", "GROUP", "RESIDENT", "NODE0", "OTHER", "HOT", "IDLE", "PINNED", "MOVED");
  for (const auto& t : targets) {
    const json nodes = t.value("resident_bytes_per_node", json::object());
    std::uint64_t node0 = 0;
    std::uint64_t other = 0;
    for (const auto& [node, bytes] : nodes.items()) {
      (node == "0" ? node0 : other) += bytes.get<std::uint64_t>();
    }
    fmt::print("{:>7} {:<16} {:<12} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10}\n",
               get_or(t, "pid", 0), get_or<std::string>(t, "comm", "?"),
               get_or<std::string>(t, "group", "?"), size_text(t, "resident_bytes"),
               policy::format_size(node0), policy::format_size(other), size_text(t, "hot_bytes"),
               size_text(t, "idle_bytes"), size_text(t, "pinned_bytes"),
               size_text(t, "moved_bytes"));
  }
  if (targets.empty()) fmt::print("(no target process matches the config's selectors)\n");
}

// One character per bin, darker for hotter (log scale: 0.01/s .. 100/s).
char shade(double heat) {
  static constexpr std::string_view kRamp = " .:-=+*#%@";
  if (heat <= 0.01) return kRamp[0];
  const double pos = (std::log10(heat) + 2.0) / 4.0 * static_cast<double>(kRamp.size() - 1);
  return kRamp[std::clamp<std::size_t>(static_cast<std::size_t>(std::max(1.0, pos)), 1,
                                       kRamp.size() - 1)];
}

std::string svg_color(double heat) {
  const double x = heat <= 0.01 ? 0.0 : std::clamp((std::log10(heat) + 2.0) / 4.0, 0.0, 1.0);
  const auto r = static_cast<int>(255 * x);
  const auto b = static_cast<int>(255 * (1.0 - x));
  return fmt::format("rgb({},{},{})", r, 40, b);
}

Result<void> write_svg(const std::string& path, const json& hm) {
  const auto& rows = hm["history"];
  const std::size_t bins = rows.empty() ? 0 : rows.front().size();
  constexpr int kCell = 8;
  const auto width = static_cast<int>(bins) * kCell + 120;
  const auto height = static_cast<int>(rows.size()) * kCell + 60;
  std::ofstream out(path);
  if (!out) return fail(fmt::format("{}: cannot write: {}", path, errno_text(errno)), errno);
  out << fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{}\">\n"
      "<text x=\"4\" y=\"14\" font-family=\"monospace\" font-size=\"12\">pid {} ({}): heat "
      "(accesses/s per page, log scale) over the tracked address space (x) and time (y, newest "
      "at the bottom)</text>\n",
      width, height, get_or(hm, "pid", 0), get_or<std::string>(hm, "comm", "?"));
  for (std::size_t y = 0; y < rows.size(); ++y) {
    for (std::size_t x = 0; x < rows[y].size(); ++x) {
      out << fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"{}\"/>\n",
                         static_cast<int>(x) * kCell + 100, static_cast<int>(y) * kCell + 24, kCell,
                         kCell, svg_color(rows[y][x].get<double>()));
    }
  }
  out << "</svg>\n";
  if (!out) return fail(fmt::format("{}: write failed", path));
  return {};
}

void print_heatmap(const json& hm) {
  const auto& rows = hm["history"];
  const double interval = get_or(hm, "interval_s", 1.0);
  fmt::print(
      "pid {} ({}): heat over the tracked address space (left: low addresses), one row "
      "per step of {:.1f}s, newest last; ' ' idle ... '@' >= 100 accesses/s per page\n",
      get_or(hm, "pid", 0), get_or<std::string>(hm, "comm", "?"), interval);
  for (std::size_t y = 0; y < rows.size(); ++y) {
    std::string line;
    for (const auto& v : rows[y]) line += shade(v.get<double>());
    const double age = static_cast<double>(rows.size() - 1 - y) * interval;
    fmt::print("{:>7.1f}s ago |{}|\n", age, line);
  }
}

void print_explain(const json& ex, bool all) {
  fmt::print("pid {} ({}), group '{}'\n", get_or(ex, "pid", 0),
             get_or<std::string>(ex, "comm", "?"), get_or<std::string>(ex, "group", "?"));
  fmt::print("{:<33} {:>9} {:>5} {:>9} {:>8}  {}\n", "RANGE", "SIZE", "NODE", "HEAT/s", "IDLE",
             "WHY");
  std::size_t shown = 0;
  const auto& ranges = ex["ranges"];
  for (const auto& r : ranges) {
    if (!all && shown == 50) {
      fmt::print("... {} more ranges (--all shows them)\n", ranges.size() - shown);
      break;
    }
    const auto start = get_or<std::uint64_t>(r, "start", 0);
    const auto end = get_or<std::uint64_t>(r, "end", 0);
    fmt::print("{:#014x}-{:#014x}   {:>9} {:>5} {:>9.2f} {:>7.0f}s  {}\n", start, end,
               policy::format_size(end - start), get_or(r, "node", -1), get_or(r, "max_heat", 0.0),
               get_or(r, "idle_s", 0.0), get_or<std::string>(r, "why", ""));
    ++shown;
  }
}

void add_targets(CLI::App& app, Globals& g) {
  auto json_out = std::make_shared<bool>(false);
  auto* cmd = app.add_subcommand(
      "targets",
      "List the processes kvtierd manages: group, memory per node, hot, idle and pinned bytes");
  cmd->add_flag("--json", *json_out, "Print JSON");
  cmd->callback([&g, json_out] {
    ask(g, "targets", "targets", [&](const json& t) {
      if (*json_out) {
        std::cout << t.dump(2) << '\n';
      } else {
        print_targets(t);
      }
    });
  });
}

void add_top(CLI::App& app, Globals& g) {
  auto interval = std::make_shared<double>(2.0);
  auto iterations = std::make_shared<int>(0);
  auto* cmd = app.add_subcommand(
      "top", "Live per-target heat and residency per node, refreshed like top (Ctrl-C quits)");
  // NaN passes CLI::Range (every comparison is false) and made top spin.
  const CLI::Validator finite(
      [](std::string& in) -> std::string {
        double v = 0;
        if (!CLI::detail::lexical_cast(in, v) || !std::isfinite(v)) {
          return "must be a number of seconds, not " + in;
        }
        return {};
      },
      "SECONDS");
  cmd->add_option("-d,--delay", *interval, "Seconds between refreshes")
      ->capture_default_str()
      ->check(finite)
      ->check(CLI::Range(0.1, 3600.0));
  cmd->add_option("-n,--iterations", *iterations, "Stop after N refreshes (0: never)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  cmd->callback([&g, interval, iterations] {
    const bool tty = isatty(STDOUT_FILENO) != 0;
    for (int i = 0; *iterations == 0 || i < *iterations; ++i) {
      if (i > 0) {
        std::this_thread::sleep_for(std::chrono::duration<double>(*interval));
      }
      ask(g, "top", "status", [&](const json& st) {
        if (tty) fmt::print("\x1b[H\x1b[2J");
        const json loop = st.value("loop", json::object());
        fmt::print("kvtierd: {} | source {} | mover {} | step {} | last plan: {} moves\n",
                   get_or<bool>(st, "paused", false) ? "PAUSED" : "active",
                   get_or<std::string>(loop, "source", "none"),
                   get_or<std::string>(loop, "mover", "none (observe-only)"),
                   get_or<std::uint64_t>(loop, "steps", 0),
                   get_or<std::uint64_t>(loop.value("last_plan", json::object()), "moves", 0));
        print_targets(loop.value("targets", json::array()));
        std::cout.flush();
      });
      if (g.exit_code != kExitOk) return;
    }
  });
}

void add_explain(CLI::App& app, Globals& g) {
  auto pid = std::make_shared<int>(0);
  auto json_out = std::make_shared<bool>(false);
  auto all = std::make_shared<bool>(false);
  auto* cmd = app.add_subcommand(
      "explain", "Why each range of a target sits on its node, and what would move it");
  cmd->add_option("PID", *pid, "A target's pid (see kvtierctl targets)")->required();
  cmd->add_flag("--json", *json_out, "Print JSON");
  cmd->add_flag("--all", *all, "Show every range, not the first 50");
  cmd->callback([&g, pid, json_out, all] {
    ask(
        g, "explain", "explain",
        [&](const json& ex) {
          if (*json_out) {
            std::cout << ex.dump(2) << '\n';
          } else {
            print_explain(ex, *all);
          }
        },
        json{{"pid", *pid}});
  });
}

void add_heatmap(CLI::App& app, Globals& g) {
  auto pid = std::make_shared<int>(0);
  auto svg = std::make_shared<std::string>();
  auto bins = std::make_shared<std::size_t>(64);
  auto json_out = std::make_shared<bool>(false);
  auto* cmd = app.add_subcommand(
      "heatmap",
      "Access heat over a target's address space and over time, as text or as an SVG file");
  cmd->add_option("PID", *pid, "A target's pid (see kvtierctl targets)")->required();
  cmd->add_option("--svg", *svg, "Also write the heat map as an SVG image to FILE")
      ->option_text("FILE");
  cmd->add_option("--bins", *bins, "Address bins for the current row")
      ->capture_default_str()
      ->check(CLI::Range(1, 4096));
  cmd->add_flag("--json", *json_out, "Print JSON");
  cmd->callback([&g, pid, svg, bins, json_out] {
    ask(
        g, "heatmap", "heatmap",
        [&](const json& hm) {
          if (*json_out) {
            std::cout << hm.dump() << '\n';
          } else {
            print_heatmap(hm);
          }
          if (!svg->empty()) {
            if (auto ok = write_svg(*svg, hm); !ok) {
              std::cerr << "kvtierctl heatmap: " << ok.error().message << '\n';
              g.exit_code = kExitFailed;
            } else if (!*json_out) {
              fmt::print("wrote {}\n", *svg);
            }
          }
        },
        json{{"pid", *pid}, {"bins", *bins}});
  });
}

}  // namespace

void add_loop_commands(CLI::App& app, Globals& g) {
  add_targets(app, g);
  add_top(app, g);
  add_explain(app, g);
  add_heatmap(app, g);
}

}  // namespace kvtier::agent::ctl
