// kvtierctl replay: a recording of kvtierd's steps through the planner with
// another configuration (agent/replay), side by side with what the recording
// did; --sweep tries several values of one key and prints the frontier.

#include <fmt/format.h>
#include <spawn.h>
#include <spdlog/spdlog.h>
#include <sys/wait.h>
#include <unistd.h>

#include <toml++/toml.h>
#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <variant>
#include <vector>

#include "agent/ctl/command.hpp"
#include "agent/host/sysfs.hpp"
#include "agent/loop/recording.hpp"
#include "agent/replay/replay.hpp"
#include "agent/replay/truth.hpp"
#include "policy/config.hpp"
#include "policy/error.hpp"
#include "policy/topology.hpp"
#include "policy/types.hpp"
#include "policy/units.hpp"

namespace kvtier::agent::ctl {
namespace {

using nlohmann::json;

struct Options {
  std::string file;
  std::string config;
  std::string against;
  std::string sweep;
  std::vector<std::string> truth;
  std::string png;
  bool json_out = false;
  bool every_step = false;
};

// The figures of one run (the recording's own, or a replay's).
struct Column {
  std::string name;
  std::uint64_t demoted = 0;
  std::uint64_t promoted = 0;
  TierBytes end;
  double offload = 0;  // mean share of the located target memory on the slow tier
  double sampled_dram = 0;
  double sampled_slow = 0;
  std::string exactness;
  bool has_truth = false;
  TruthScore truth;
};

double share(double part, double whole) {
  return whole > 0 ? part / whole : 0.0;
}

Column column_of(const ReplayRun& run, bool recorded, std::string name) {
  Column c{.name = std::move(name)};
  double offload_sum = 0;
  std::size_t n = 0;
  for (const auto& s : run.steps) {
    const TierBytes t = recorded ? s.rec_placed : s.placed;
    if (t.dram + t.slow == 0) continue;
    offload_sum += share(static_cast<double>(t.slow), static_cast<double>(t.dram + t.slow));
    ++n;
  }
  c.offload = n > 0 ? offload_sum / static_cast<double>(n) : 0.0;
  if (!run.steps.empty()) c.end = recorded ? run.steps.back().rec_placed : run.steps.back().placed;
  c.demoted = recorded ? run.rec_demoted_bytes : run.demoted_bytes;
  c.promoted = recorded ? run.rec_promoted_bytes : run.promoted_bytes;
  c.sampled_dram = recorded ? run.rec_sampled_dram : run.sampled_dram;
  c.sampled_slow = recorded ? run.rec_sampled_slow : run.sampled_slow;
  c.has_truth = run.has_truth;
  c.truth = recorded ? run.rec_truth : run.truth;
  const std::size_t total = run.steps.size();
  if (recorded) {
    c.exactness = "exact (as recorded)";
  } else if (run.steps_as_recorded == total) {
    c.exactness = fmt::format("exact: all {} steps made the recorded plan", total);
  } else {
    c.exactness = fmt::format("estimate: {} of {} steps made the recorded plan",
                              run.steps_as_recorded, total);
  }
  return c;
}

json truth_json(const TruthScore& t) {
  return json{{"dram_read_share", t.dram_share()},
              {"read_bytes", t.read_bytes},
              {"dram_read_bytes", t.dram_read_bytes},
              {"unplaced_read_bytes", t.unplaced_read_bytes},
              {"judged_steps", t.judged_steps},
              {"slow_precision", t.precision()},
              {"slow_recall", t.recall()},
              {"slow_pages", t.slow_pages},
              {"cold_pages", t.cold_pages},
              {"slow_cold_pages", t.slow_cold_pages},
              {"demoted_bytes_judged", t.demoted_bytes},
              {"misdemoted_bytes", t.misdemoted_bytes},
              {"misdemoted_share", t.misdemoted_share()},
              {"demoted_bytes_unjudged", t.unjudged_demoted_bytes}};
}

json column_json(const Column& c) {
  json j = json{{"demoted_bytes", c.demoted},
                {"promoted_bytes", c.promoted},
                {"dram_bytes_at_end", c.end.dram},
                {"slow_bytes_at_end", c.end.slow},
                {"mean_slow_share", c.offload},
                {"sampled_dram_share", share(c.sampled_dram, c.sampled_dram + c.sampled_slow)},
                {"exactness", c.exactness}};
  if (c.has_truth) j["truth"] = truth_json(c.truth);
  return j;
}

json steps_json(const ReplayRun& run, bool recorded) {
  json out = json::array();
  for (const auto& s : run.steps) {
    const TierBytes t = recorded ? s.rec_placed : s.placed;
    out.push_back(json{{"t_ns", s.now},
                       {"kind", s.kind == StepKind::kStep ? "step" : "promote"},
                       {"demoted_bytes", recorded ? s.rec_demoted_bytes : s.demoted_bytes},
                       {"promoted_bytes", recorded ? s.rec_promoted_bytes : s.promoted_bytes},
                       {"dram_bytes", t.dram},
                       {"slow_bytes", t.slow},
                       {"plan_as_recorded", recorded || s.plan_as_recorded}});
    if (run.has_truth) out.back()["truth"] = truth_json(recorded ? s.rec_truth : s.truth);
  }
  return out;
}

std::string mib(std::uint64_t b) {
  return fmt::format("{:.1f}", static_cast<double>(b) / (1 << 20));
}

std::string pct(double v) {
  return fmt::format("{:.1f}%", 100 * v);
}

// One row per step (promotion ticks add their moves, and the reads they saw, to the next
// step's row). With ground truth, each run also gets the DRAM share of the row's reads.
void print_steps(const ReplayRun& run, const std::vector<const ReplayRun*>& others) {
  const bool truth = run.has_truth;
  fmt::print("{:>8} | {:>9} {:>9} {:>9} {:>9}{} |", "t (s)", "rec dem", "rec pro", "rec DRAM",
             "rec CXL", truth ? fmt::format(" {:>8}", "rec rd%") : "");
  for (std::size_t i = 0; i < others.size(); ++i) {
    const char* w = i == 0 ? "new" : "old";
    fmt::print(" {:>9} {:>9} {:>9} {:>9}{} {:1} |", fmt::format("{} dem", w),
               fmt::format("{} pro", w), fmt::format("{} DRAM", w), fmt::format("{} CXL", w),
               truth ? fmt::format(" {:>8}", fmt::format("{} rd%", w)) : "", "");
  }
  fmt::print("   (MiB; = : the recorded plan{})\n",
             truth ? "; rd%: DRAM share of kvsim's reads since the last row" : "");
  const TimeNs t0 = run.steps.empty() ? 0 : run.steps.front().now;
  std::vector<std::uint64_t> dem(others.size() + 1);
  std::vector<std::uint64_t> pro(others.size() + 1);
  std::vector<TruthScore> reads(others.size() + 1);
  const auto rd = [truth](const TruthScore& t) {
    return truth ? fmt::format(" {:>8}", t.read_bytes > 0 ? pct(t.dram_share()) : "-") : "";
  };
  for (std::size_t k = 0; k < run.steps.size(); ++k) {
    const auto& s = run.steps[k];
    dem[0] += s.rec_demoted_bytes;
    pro[0] += s.rec_promoted_bytes;
    reads[0].add(s.rec_truth);
    for (std::size_t i = 0; i < others.size(); ++i) {
      dem[i + 1] += others[i]->steps[k].demoted_bytes;
      pro[i + 1] += others[i]->steps[k].promoted_bytes;
      reads[i + 1].add(others[i]->steps[k].truth);
    }
    if (s.kind != StepKind::kStep) continue;
    fmt::print("{:>8.1f} | {:>9} {:>9} {:>9} {:>9}{} |", static_cast<double>(s.now - t0) / 1e9,
               mib(dem[0]), mib(pro[0]), mib(s.rec_placed.dram), mib(s.rec_placed.slow),
               rd(reads[0]));
    for (std::size_t i = 0; i < others.size(); ++i) {
      const auto& o = others[i]->steps[k];
      fmt::print(" {:>9} {:>9} {:>9} {:>9}{} {:1} |", mib(dem[i + 1]), mib(pro[i + 1]),
                 mib(o.placed.dram), mib(o.placed.slow), rd(reads[i + 1]),
                 o.plan_as_recorded ? "=" : "");
    }
    fmt::print("\n");
    std::ranges::fill(dem, 0);
    std::ranges::fill(pro, 0);
    std::ranges::fill(reads, TruthScore{});
  }
}

void print_totals(const std::vector<Column>& cols) {
  fmt::print("{:<34}", "");
  for (const auto& c : cols) fmt::print(" {:>16}", c.name);
  fmt::print("\n");
  const auto row = [&](const char* label, auto value) {
    fmt::print("{:<34}", label);
    for (const auto& c : cols) fmt::print(" {:>16}", value(c));
    fmt::print("\n");
  };
  row("demoted", [](const Column& c) { return policy::format_size(c.demoted); });
  row("promoted", [](const Column& c) { return policy::format_size(c.promoted); });
  row("DRAM at the end", [](const Column& c) { return policy::format_size(c.end.dram); });
  row("CXL at the end", [](const Column& c) { return policy::format_size(c.end.slow); });
  row("on CXL, mean of steps",
      [](const Column& c) { return fmt::format("{:.1f}%", 100 * c.offload); });
  row("sampled accesses on DRAM (est.)", [](const Column& c) {
    return fmt::format("{:.1f}%", 100 * share(c.sampled_dram, c.sampled_dram + c.sampled_slow));
  });
  if (!cols.empty() && cols[0].has_truth) {
    row("DRAM share of reads (truth)",
        [](const Column& c) { return c.truth.read_bytes > 0 ? pct(c.truth.dram_share()) : "-"; });
    row("on CXL and cold: precision",
        [](const Column& c) { return c.truth.judged_steps > 0 ? pct(c.truth.precision()) : "-"; });
    row("cold and on CXL: recall",
        [](const Column& c) { return c.truth.judged_steps > 0 ? pct(c.truth.recall()) : "-"; });
    row("mis-demoted (read within age)", [](const Column& c) {
      return fmt::format("{} {}", policy::format_size(c.truth.misdemoted_bytes),
                         fmt::format("({})", pct(c.truth.misdemoted_share())));
    });
  }
  for (const auto& c : cols) fmt::print("{}: {}\n", c.name, c.exactness);
}

// What the truth figures are, under the table.
void print_truth_note(const ReplayRun& run, std::size_t windows) {
  const TruthScore& t = run.rec_truth;
  fmt::print(
      "Ground truth: {} windows of kvsim's reads ({} read, {} from pages the recording never\n"
      "located); truly cold: not read for {} (the cold_age of --config's group), judged at {}\n"
      "steps; mis-demoted: demoted, then read within that age ({} demoted too late to judge).\n"
      "Truth figures are estimates: the recorded column's DRAM share is kvsim's reads with the\n"
      "placement the recording located (it estimates kvsim's own read_nodes measurement, see\n"
      "docs/recording.md for the measured error); a replay's are the recorded reads with its\n"
      "placement (how the workload would have reacted to it is unknown).\n",
      windows,
      policy::format_size(static_cast<std::uint64_t>(t.read_bytes + t.unplaced_read_bytes)),
      policy::format_size(static_cast<std::uint64_t>(t.unplaced_read_bytes)),
      policy::format_duration(run.truth_cold_age), t.judged_steps,
      policy::format_size(t.unjudged_demoted_bytes));
}

// The config at `path` with `key` (dotted; an array of tables, such as
// [[group]], takes the value in every element) set to `value` (a number or a
// boolean when it reads as one, else a string).
std::expected<std::string, std::string> with_key(const std::string& path, const std::string& key,
                                                 const std::string& value) {
  toml::table tbl;
  try {
    tbl = toml::parse_file(path);
  } catch (const toml::parse_error& e) {
    return std::unexpected(fmt::format("{}: {}", path, e.description()));
  }
  std::vector<std::string> parts;
  std::stringstream ss(key);
  for (std::string p; std::getline(ss, p, '.');) parts.push_back(p);
  if (parts.empty()) return std::unexpected("--sweep: an empty key");
  std::vector<toml::table*> at{&tbl};
  for (std::size_t i = 0; i + 1 < parts.size(); ++i) {
    std::vector<toml::table*> next;
    for (toml::table* t : at) {
      toml::node* n = t->get(parts[i]);
      if (n == nullptr) {
        next.push_back(t->insert_or_assign(parts[i], toml::table{}).first->second.as_table());
      } else if (auto* sub = n->as_table()) {
        next.push_back(sub);
      } else if (auto* arr = n->as_array()) {
        for (auto& e : *arr) {
          if (auto* et = e.as_table()) next.push_back(et);
        }
      } else {
        return std::unexpected(fmt::format("--sweep {}: {} is not a table", key, parts[i]));
      }
    }
    at = std::move(next);
  }
  for (toml::table* t : at) {
    char* end = nullptr;
    const long long i = std::strtoll(value.c_str(), &end, 10);
    if (!value.empty() && *end == '\0') {
      t->insert_or_assign(parts.back(), static_cast<std::int64_t>(i));
      continue;
    }
    const double d = std::strtod(value.c_str(), &end);
    if (!value.empty() && *end == '\0') {
      t->insert_or_assign(parts.back(), d);
    } else if (value == "true" || value == "false") {
      t->insert_or_assign(parts.back(), value == "true");
    } else {
      t->insert_or_assign(parts.back(), value);
    }
  }
  std::ostringstream out;
  out << tbl;
  return out.str();
}

const policy::Topology* first_topology(const Recording& rec) {
  for (const auto& r : rec.records) {
    if (const auto* t = std::get_if<RecTopology>(&r)) return &t->topology;
  }
  return nullptr;
}

std::optional<policy::CompiledConfig> compile(const std::string& text, const std::string& what,
                                              const policy::Topology* topo) {
  auto cc = policy::compile_config_text(text, what, topo);
  if (!cc) {
    for (const auto& l : policy::problem_lines(cc.error())) fmt::print(stderr, "{}\n", l);
    return std::nullopt;
  }
  return std::move(*cc);
}

std::optional<std::string> slurp(const std::string& path) {
  std::ifstream f(path);
  if (!f) {
    fmt::print(stderr, "kvtierctl replay: {}: cannot read: {}\n", path, errno_text(errno));
    return std::nullopt;
  }
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

// The truth: the accesses records of the recording itself and of every --truth file,
// merged by time, with the cold_age of --config's group as the yardstick.
struct TruthFiles {
  std::vector<RecAccesses> windows;
  bool ok = true;
};
TruthFiles read_truth(const Options& o, const Recording& rec) {
  TruthFiles out{.windows = truth_windows(rec)};
  for (const auto& path : o.truth) {
    auto t = read_recording(path);
    if (!t) {
      fmt::print(stderr, "kvtierctl replay: --truth {}\n", t.error().message);
      out.ok = false;
      return out;
    }
    if (!t->note.empty()) fmt::print(stderr, "kvtierctl replay: {}\n", t->note);
    auto w = truth_windows(*t);
    if (w.empty()) {
      fmt::print(stderr,
                 "kvtierctl replay: --truth {}: no accesses records (is it kvsim's "
                 "--truth-record file?)\n",
                 path);
      out.ok = false;
      return out;
    }
    out.windows.insert(out.windows.end(), w.begin(), w.end());
  }
  return out;
}

int run_sweep(const Options& o, const Recording& rec, const TruthInput& truth) {
  const auto eq = o.sweep.find('=');
  if (eq == std::string::npos) {
    fmt::print(stderr, "kvtierctl replay: --sweep {}: expected KEY=V1,V2,...\n", o.sweep);
    return kExitUsage;
  }
  const std::string key = o.sweep.substr(0, eq);
  std::vector<std::string> values;
  std::stringstream ss(o.sweep.substr(eq + 1));
  for (std::string v; std::getline(ss, v, ',');) values.push_back(v);
  struct Point {
    std::string value;
    Column col;
  };
  std::vector<Point> points;
  for (const auto& v : values) {
    auto text = with_key(o.config, key, v);
    if (!text) {
      fmt::print(stderr, "kvtierctl replay: {}\n", text.error());
      return kExitFailed;
    }
    auto cc = compile(*text, fmt::format("{} ({}={})", o.config, key, v), first_topology(rec));
    if (!cc) return kExitFailed;
    auto run = replay(rec, *cc, truth);
    if (!run) {
      fmt::print(stderr, "kvtierctl replay: {}\n", run.error().message);
      return kExitFailed;
    }
    points.push_back({v, column_of(*run, false, fmt::format("{}={}", key, v))});
  }
  // A point is on the frontier when no other has both more offload and a higher DRAM share:
  // the DRAM share of kvsim's reads with ground truth, else of the sampled accesses.
  const bool has_truth = !truth.windows.empty();
  const auto dram = [has_truth](const Column& c) {
    return has_truth ? c.truth.dram_share()
                     : share(c.sampled_dram, c.sampled_dram + c.sampled_slow);
  };
  json out = json::array();
  if (!o.json_out) {
    fmt::print("{:<24} {:>12} {:>12} {:>16} {:>22} {:>9}\n", key, "demoted", "promoted",
               "on CXL (mean)", has_truth ? "DRAM share of reads" : "sampled on DRAM (est.)",
               "frontier");
  }
  for (const auto& p : points) {
    const bool dominated = std::ranges::any_of(points, [&](const Point& q) {
      return q.col.offload >= p.col.offload && dram(q.col) >= dram(p.col) &&
             (q.col.offload > p.col.offload || dram(q.col) > dram(p.col));
    });
    if (o.json_out) {
      json j = column_json(p.col);
      j["value"] = p.value;
      j["frontier"] = !dominated;
      out.push_back(j);
    } else {
      fmt::print("{:<24} {:>12} {:>12} {:>15.1f}% {:>21.1f}% {:>9}\n", p.value,
                 policy::format_size(p.col.demoted), policy::format_size(p.col.promoted),
                 100 * p.col.offload, 100 * dram(p.col), dominated ? "" : "*");
    }
  }
  if (o.json_out) {
    std::cout << json{{"key", key},
                      {"frontier_by", has_truth ? "truth.dram_read_share" : "sampled_dram_share"},
                      {"points", out}}
                     .dump(2)
              << '\n';
  } else if (has_truth) {
    fmt::print(
        "* on the frontier: no other value keeps more on CXL with a higher DRAM share of kvsim's\n"
        "reads. Estimates: the recorded reads with the replay's placement (docs/recording.md).\n");
  } else {
    fmt::print(
        "* on the frontier: no other value keeps more on CXL with more sampled accesses on DRAM.\n"
        "Estimates: the recorded evidence with the replay's placement (docs/recording.md).\n");
  }
  return kExitOk;
}

// The plotting script: $KVTIER_REPLAY_PLOT, else the installed one (PREFIX/share/kvtier,
// beside this kvtierctl's PREFIX/bin), else the source tree's (a kvtierctl run from its build).
std::string plot_script() {
  // NOLINTNEXTLINE(concurrency-mt-unsafe): kvtierctl runs one thread
  if (const char* env = std::getenv("KVTIER_REPLAY_PLOT"); env != nullptr && *env != '\0') {
    return env;
  }
  std::error_code ec;
  const auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    const auto installed = exe.parent_path().parent_path() / "share/kvtier/replay_plot.py";
    if (std::filesystem::exists(installed, ec)) return installed.string();
  }
  return KVTIER_REPLAY_PLOT_SOURCE;
}

// --png: the replay's JSON drawn by replay_plot.py (python3-matplotlib). A missing python3 or
// matplotlib is one line on stderr and a failed exit, after the table.
int draw_png(const json& j, const std::string& png) {
  // In $TMPDIR (else /tmp), where the user may write; mkstemp fills in the X's.
  std::string path = (agent::temp_dir() / "kvtier-replay-plot-XXXXXX").string();
  char* tmpl = path.data();
  const int fd = mkstemp(tmpl);
  if (fd < 0) {
    fmt::print(stderr, "kvtierctl replay --png: cannot create a temporary file: {}\n",
               errno_text(errno));
    return kExitFailed;
  }
  const std::string text = j.dump();
  const bool written = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  ::close(fd);
  int rc = kExitFailed;
  if (!written) {
    fmt::print(stderr, "kvtierctl replay --png: cannot write {}\n", tmpl);
  } else {
    const std::string script = plot_script();
    std::vector<std::string> args{"python3", script, tmpl, png};
    std::vector<char*> argv;
    argv.reserve(args.size() + 1);
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    pid_t pid = 0;
    const int err = posix_spawnp(&pid, "python3", nullptr, nullptr, argv.data(), environ);
    int status = 0;
    if (err != 0) {
      fmt::print(stderr,
                 "kvtierctl replay --png: cannot run python3 ({}); install python3 and "
                 "python3-matplotlib\n",
                 errno_text(err));
    } else if (waitpid(pid, &status, 0) < 0 || !WIFEXITED(status)) {
      fmt::print(stderr, "kvtierctl replay --png: {} did not finish\n", script);
    } else if (WEXITSTATUS(status) == 0) {
      rc = kExitOk;
    } else if (WEXITSTATUS(status) == 127) {
      fmt::print(stderr,
                 "kvtierctl replay --png: cannot run python3; install python3 and "
                 "python3-matplotlib\n");
    }  // else: the script said what failed
  }
  std::filesystem::remove(tmpl);
  return rc;
}

// The truth of --truth and of the recording itself, with the cold_age of --config's group
// as the yardstick; nothing (said on stderr) when a file cannot be read.
std::optional<TruthInput> load_truth(const Options& o, const Recording& rec) {
  TruthFiles files = read_truth(o, rec);
  if (!files.ok) return std::nullopt;
  TruthInput truth{.windows = std::move(files.windows)};
  if (!truth.windows.empty()) {
    auto text = slurp(o.config);
    if (!text) return std::nullopt;
    auto cc = compile(*text, o.config, first_topology(rec));
    if (!cc) return std::nullopt;
    truth.cold_age = truth_cold_age(rec, truth.windows, *cc);
  }
  return truth;
}

// What --json prints (and --png draws).
json replay_json(const Options& o, const std::vector<ReplayRun>& runs,
                 const std::vector<Column>& cols,
                 const std::vector<std::pair<std::string, std::string>>& configs,
                 const TruthInput& truth) {
  json j{{"recording", o.file},
         {"steps", runs[0].steps.size()},
         {"recorded", column_json(cols[0])},
         {"recorded_steps", steps_json(runs[0], true)}};
  if (runs[0].has_truth) {
    j["truth"] = json{{"files", o.truth},
                      {"windows", truth.windows.size()},
                      {"cold_age_ns", truth.cold_age},
                      {"exactness",
                       "estimates: the recorded column's DRAM share of reads is kvsim's reads "
                       "with the placement the recording located; a replay's, the recorded reads "
                       "with its placement (docs/recording.md)"}};
  }
  for (std::size_t i = 0; i < runs.size(); ++i) {
    j[configs[i].first] = column_json(cols[i + 1]);
    j[configs[i].first]["config"] = configs[i].second;
    j[configs[i].first + "_steps"] = steps_json(runs[i], false);
  }
  return j;
}

int run_replay(const Options& o) {
  // The replayed loop's own log lines (a move of a process that had exited...) are the
  // recording's history, not news: kept off the table and the JSON.
  spdlog::set_level(spdlog::level::off);
  auto rec = read_recording(o.file);
  if (!rec) {
    fmt::print(stderr, "kvtierctl replay: {}\n", rec.error().message);
    return kExitFailed;
  }
  if (!rec->note.empty()) fmt::print(stderr, "kvtierctl replay: {}\n", rec->note);
  auto loaded = load_truth(o, *rec);
  if (!loaded) return kExitFailed;
  const TruthInput& truth = *loaded;
  if (!o.sweep.empty()) {
    if (!o.png.empty()) {
      fmt::print(stderr, "kvtierctl replay: --png draws one replay, not a --sweep\n");
      return kExitUsage;
    }
    return run_sweep(o, *rec, truth);
  }
  std::vector<std::pair<std::string, std::string>> configs{{"new", o.config}};
  if (!o.against.empty()) configs.emplace_back("against", o.against);
  std::vector<ReplayRun> runs;
  for (const auto& [name, path] : configs) {
    auto text = slurp(path);
    if (!text) return kExitFailed;
    auto cc = compile(*text, path, first_topology(*rec));
    if (!cc) return kExitFailed;
    auto run = replay(*rec, *cc, truth);
    if (!run) {
      fmt::print(stderr, "kvtierctl replay: {}\n", run.error().message);
      return kExitFailed;
    }
    runs.push_back(std::move(*run));
  }
  std::vector<Column> cols{column_of(runs[0], true, "recorded")};
  for (std::size_t i = 0; i < runs.size(); ++i) {
    cols.push_back(column_of(runs[i], false, configs[i].first));
  }
  const json j = replay_json(o, runs, cols, configs, truth);
  const int png = o.png.empty() ? kExitOk : draw_png(j, o.png);
  if (o.json_out) {
    std::cout << j.dump(2) << '\n';
    return png;
  }
  const auto& st = runs[0].steps;
  const auto ticks = std::ranges::count(st, StepKind::kPromote, &ReplayStep::kind);
  fmt::print("replay of {}: {} steps and {} promotion ticks over {:.1f} s; new = {}{}\n", o.file,
             st.size() - static_cast<std::size_t>(ticks), ticks,
             st.empty() ? 0.0 : static_cast<double>(st.back().now - st.front().now) / 1e9, o.config,
             o.against.empty() ? "" : ", old = " + o.against);
  if (o.every_step) {
    std::vector<const ReplayRun*> others;
    others.reserve(runs.size());
    for (const auto& r : runs) others.push_back(&r);
    print_steps(runs[0], others);
    fmt::print("\n");
  }
  print_totals(cols);
  fmt::print(
      "Exact: the recorded column; a replay's figures wherever it made the recorded plan.\n"
      "Estimated otherwise: the recorded evidence is kept (how accesses would change with the\n"
      "placement is unknown), the replay's moves succeed unless the recording made them, the\n"
      "kernel's own moves are taken from the recording (docs/recording.md).\n");
  if (runs[0].has_truth) print_truth_note(runs[0], truth.windows.size());
  if (!o.png.empty() && png == kExitOk) fmt::print("{}: residency over time\n", o.png);
  return png;
}

}  // namespace

void add_replay_command(CLI::App& app, Globals& g) {
  auto o = std::make_shared<Options>();
  auto* cmd = app.add_subcommand(
      "replay",
      "Replay a recording (kvtierctl record) through the planner with another config: "
      "bytes moved and residency (and, with a workload's ground truth, its DRAM share of reads, "
      "precision, recall and mis-demotions), side by side with the recording (no root, no "
      "daemon)");
  cmd->add_option("FILE", o->file, "The recording")->required()->check(CLI::ExistingFile);
  cmd->add_option("--config", o->config, "The configuration to try")
      ->required()
      ->check(CLI::ExistingFile);
  cmd->add_option("--against", o->against, "Another configuration, replayed beside it")
      ->check(CLI::ExistingFile);
  cmd->add_option("--sweep", o->sweep,
                  "KEY=V1,V2,...: replay --config with KEY set to each value and print the "
                  "frontier of offload against the DRAM share of reads (with --truth) or sampled "
                  "accesses on DRAM (e.g. group.policy.cold_age=5s,10s,30s)");
  cmd->add_option("--truth", o->truth,
                  "kvsim's ground truth (kvsim --truth-record FILE), merged with the recording "
                  "by time: adds the DRAM share of reads, precision and recall of what is on "
                  "CXL, and mis-demotions (repeat for several files)")
      ->allow_extra_args(false)  // one file per --truth: FILE after it stays the recording
      ->check(CLI::ExistingFile);
  cmd->add_option("--png", o->png,
                  "Also draw residency over time (and the DRAM share of reads with --truth) into "
                  "this PNG, with python3-matplotlib");
  cmd->add_flag("--json", o->json_out, "Print JSON");
  cmd->add_flag("--steps", o->every_step, "Print every step, not only the totals");
  cmd->callback([&g, o] { g.exit_code = run_replay(*o); });
}

}  // namespace kvtier::agent::ctl
