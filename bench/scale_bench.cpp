// The whole control-loop step (agent::Controller::step: discover, the sources'
// drain into the heat tables, residency, plan, dispatch, record and telemetry)
// at many sizes of tracked memory, for issue 33
// (docs/benchmarks.md#scale-the-step-from-16-gib-to-4-tib).
//
// Synthetic (each size in --sizes): a /proc tree in a temporary directory
// holds N processes whose one anonymous mapping is the KV pool; a generator
// gives it the KV shape (sequences of 64 KiB blocks: a few percent hot, read at
// every step; some warm, read 20 s before; the rest idle for ten minutes and
// on the CXL node), and serves as the hotness source (page samples of the hot
// blocks, at most --samples a step: the kernel's NUMA scan samples a bounded
// rate, not the pool), as the move_pages status query (the node of every
// page) and as the node sizes. The controller, the heat tables, the planner,
// the residency reader and the telemetry are the real ones; the mover only
// records. A size whose heat state would not fit in this machine's free memory
// is reported as such, with the extrapolation from the sizes measured.
//
// Real (--real SIZE): a child process maps SIZE of anonymous memory (4 KiB
// pages), writes all of it and reads a few percent of it over and over; the
// controller runs against the live /proc and /sys, the hotness sources the
// host supports (as kvtierd chooses them) and move_pages(2) as a query, in
// real time. The host has one node: the planner is shown a CXL node 1 with
// nothing on it, and the mover only records.
//
//   kvtier_scale_bench [--sizes 16GiB,128GiB,1TiB,4TiB] [--steps 6] [--targets 1]
//                      [--hot-share 0.03] [--hot-bytes SIZE] [--kernel-moves] [--real SIZE]
//                      [--drawn-shares]
//
// Prints per size: the resident memory the loop added (kvtierd's side, the
// generator's own excluded), bytes per tracked page, the step's CPU by phase
// (mean over --steps steps 5 s apart, one of them with the residency check
// kvtierd makes every 30 s: agent/loop/residency_check.hpp; later_ms is the
// mean of the steps after that first one, which also makes the first heatmap
// row after the warm-up's evidence, every chunk changed), the check's
// residency phase and the pages it asked the move_pages query about (the
// kernel's cost: about 190 ns a page), a read of every page's node (what that
// phase cost before the check), plan()'s time alone, and the growth exponent
// between sizes. Exits 1 when the loop's mechanics disagree with the generator
// (tracked bytes, bytes per node, moves in the steady state).
//
// The parts: scale_bench.hpp (what both runs share), scale_measure.cpp,
// scale_synthetic.cpp and scale_real.cpp; this file is the command line and the table.

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <unistd.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "agent/loop/loop_state.hpp"
#include "bench/scale_bench.hpp"
#include "bench/scale_generator.hpp"
#include "policy/config.hpp"
#include "policy/types.hpp"
#include "policy/units.hpp"

namespace kvtier::bench {
namespace {

void print_header() {
  fmt::print(
      "{:>9} {:>10} {:>9} {:>8} {:>8} | {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} | {:>9} "
      "{:>9} {:>9} {:>9} {:>8}\n",
      "tracked", "pages", "rss_MiB", "B/page", "heat_B/p", "discover", "sources", "residency",
      "plan", "move", "record", "step_ms", "later_ms", "check_res", "chk_pages", "full_read",
      "plan()", "samples");
}

void print_row(const std::string& label, const Figures& f) {
  const double pages = static_cast<double>(f.tracked) / kPageSize;
  const auto cpu = [&](agent::LoopPhase p) { return ms(f.cpu[static_cast<std::size_t>(p)]); };
  fmt::print(
      "{:>9} {:>10.0f} {:>9.1f} {:>8.3f} {:>8.3f} | {:>9.2f} {:>9.2f} {:>9.2f} {:>9.2f} {:>9.2f} "
      "{:>9.2f} {:>9.2f} {:>9.2f} | {:>9.1f} {:>9} {:>9.1f} {:>9.2f} {:>8}\n",
      label, pages, static_cast<double>(f.rss) / kMiB, static_cast<double>(f.rss) / pages,
      static_cast<double>(f.heat) / pages, cpu(agent::LoopPhase::kDiscover),
      cpu(agent::LoopPhase::kSources), cpu(agent::LoopPhase::kResidency),
      cpu(agent::LoopPhase::kPlan), cpu(agent::LoopPhase::kMove), cpu(agent::LoopPhase::kRecord),
      ms(f.step_cpu), ms(f.later_cpu), ms(f.check_residency), f.check_asked, ms(f.full_read),
      ms(f.plan), f.samples);
  std::fflush(stdout);  // a size can take minutes: each row as it comes
}

double exponent(double a, double b, double sa, double sb) {
  return a <= 0 || b <= 0 ? NAN : std::log(b / a) / std::log(sb / sa);
}

std::optional<std::uint64_t> parse_size(const std::string& s) {
  auto v = policy::parse_size(s);
  if (!v) return std::nullopt;
  return *v;
}

using Measured = std::vector<std::pair<std::uint64_t, Figures>>;

// --sizes: a comma-separated list of sizes of 64 MiB or more; std::nullopt after one line on
// stderr naming the word that is not.
std::optional<std::vector<std::uint64_t>> parse_sizes(const std::string& arg) {
  std::vector<std::uint64_t> sizes;
  for (std::size_t at = 0; at <= arg.size();) {
    const std::size_t comma = std::min(arg.find(',', at), arg.size());
    const std::string word = arg.substr(at, comma - at);
    auto v = parse_size(word);
    if (!v || *v < 64 * kMiB) {
      fmt::print(stderr, "scale_bench: --sizes: '{}' is not a size of 64MiB or more\n", word);
      return std::nullopt;
    }
    sizes.push_back(*v);
    at = comma + 1;
  }
  return sizes;
}

// A size that does not fit this machine: what the last two measured sizes' growth makes of it.
void print_extrapolation(const std::string& label, std::uint64_t size, const Measured& done) {
  if (done.size() < 2) return;
  const auto& [s1, f1] = done[done.size() - 2];
  const auto& [s2, f2] = done.back();
  const auto r = static_cast<double>(size) / static_cast<double>(s2);
  const double ec = exponent(static_cast<double>(f1.step_cpu), static_cast<double>(f2.step_cpu),
                             static_cast<double>(s1), static_cast<double>(s2));
  const double em = exponent(static_cast<double>(f1.rss), static_cast<double>(f2.rss),
                             static_cast<double>(s1), static_cast<double>(s2));
  fmt::print(
      "{:>9} extrapolated (exponents of the last two sizes): rss {:.0f} MiB, step {:.0f} "
      "ms\n",
      label, static_cast<double>(f2.rss) * std::pow(r, em) / kMiB,
      ms(f2.step_cpu) * std::pow(r, ec));
}

// Every size that fits, a row each (measured ones into `done`); whether one failed.
bool run_sizes(const std::vector<std::uint64_t>& sizes, const Synthetic& o,
               std::optional<std::uint64_t> hot_bytes, Measured& done) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / fmt::format("kvtier-scale-{}", getpid());
  bool failed = false;
  double bytes_per_page = 20.0;  // before any size was measured: the dense table's 16, and more
  for (const std::uint64_t size : sizes) {
    const std::string label = policy::format_size(size);
    const double need = bytes_per_page * (static_cast<double>(size) / kPageSize) * 1.25 +
                        (static_cast<double>(size) / kBlock) * 2;
    const std::uint64_t avail = mem_available();
    // Leave 4 GiB to the machine's other work.
    if (need > static_cast<double>(avail) - 4.0 * kGiB) {
      fmt::print(
          "{:>9} does not fit: needs about {:.1f} GiB at {:.2f} B/page, {:.1f} GiB available\n",
          label, need / kGiB, bytes_per_page, static_cast<double>(avail) / kGiB);
      print_extrapolation(label, size, done);
      continue;
    }
    Synthetic s = o;
    s.size = size;
    if (hot_bytes) {
      s.hot_share = static_cast<double>(*hot_bytes) * 0.3 / static_cast<double>(size);
      s.warm_share = static_cast<double>(*hot_bytes) * 0.7 / static_cast<double>(size);
    }
    const Figures f = run_synthetic(s, dir);
    std::filesystem::remove_all(dir);
    print_row(label, f);
    if (!f.problem.empty()) {
      fmt::print("{:>9} FAILED: {}\n", label, f.problem);
      failed = true;
      continue;
    }
    bytes_per_page =
        std::max(1.0, static_cast<double>(f.rss) / (static_cast<double>(size) / kPageSize));
    done.emplace_back(size, f);
  }
  return failed;
}

void print_growth(const Measured& done) {
  for (std::size_t i = 1; i < done.size(); ++i) {
    const std::uint64_t s1 = done[i - 1].first;
    const std::uint64_t s2 = done[i].first;
    const Figures& f1 = done[i - 1].second;
    const Figures& f2 = done[i].second;
    const auto e = [s1, s2](double a, double b) {
      return exponent(a, b, static_cast<double>(s1), static_cast<double>(s2));
    };
    fmt::print("growth {} -> {}: step CPU ^{:.2f}, rss ^{:.2f}, plan() ^{:.2f}\n",
               policy::format_size(s1), policy::format_size(s2),
               e(static_cast<double>(f1.step_cpu), static_cast<double>(f2.step_cpu)),
               e(static_cast<double>(f1.rss), static_cast<double>(f2.rss)),
               e(static_cast<double>(f1.plan), static_cast<double>(f2.plan)));
  }
}

// --real: its row, and how it compares with the synthetic run of the same size. The exit
// status: 0, 1 when the run failed, 2 when --real is not a size of 64 MiB or more.
int real_row(const std::string& real_arg, const Synthetic& o, const Measured& done) {
  auto size = parse_size(real_arg);
  if (!size || *size < 64 * kMiB) {
    fmt::print(stderr, "scale_bench: --real: '{}' is not a size of 64MiB or more\n", real_arg);
    return 2;
  }
  std::string skipped;
  const Figures f = run_real(*size, o.steps, o.hot_share, &skipped);
  if (!skipped.empty()) {
    fmt::print("real {}: skipped: {}\n", policy::format_size(*size), skipped);
    return 0;
  }
  print_row("real", f);
  const int rc = f.problem.empty() ? 0 : 1;
  if (rc != 0) fmt::print("real FAILED: {}\n", f.problem);
  for (const auto& [s, sf] : done) {
    if (s != *size) continue;
    fmt::print("real / synthetic at {}: step CPU {:.2f}x, rss {:.2f}x, plan() {:.2f}x\n",
               policy::format_size(s),
               static_cast<double>(f.step_cpu) / static_cast<double>(sf.step_cpu),
               static_cast<double>(f.rss) / static_cast<double>(sf.rss),
               static_cast<double>(f.plan) / static_cast<double>(sf.plan));
  }
  return rc;
}

void print_intro(const Synthetic& o, std::optional<std::uint64_t> hot_bytes) {
  fmt::print(
      "kvtier_scale_bench: {} target(s), KV blocks of 64 KiB in sequences of 16-1024, {}, "
      "{} page samples a step, {} steps 5 s apart (CPU per step is their mean; ms){}\n",
      o.targets,
      hot_bytes ? fmt::format("{} hot+warm whatever the size", policy::format_size(*hot_bytes))
                : fmt::format("{:.0f}% of {} hot, {:.0f}% warm, the rest idle", o.hot_share * 100,
                              o.drawn_shares ? "sequences (each drawn)" : "the blocks",
                              o.warm_share * 100),
      o.samples, o.steps, o.kernel_moves ? "; the kernel demotes elsewhere between steps" : "");
}

int run(int argc, char** argv) {
  CLI::App app{"the control loop's step at many sizes of tracked memory (issue 33)"};
  std::string sizes_arg = "16GiB,128GiB,1TiB,4TiB";
  std::string real_arg;
  std::string hot_bytes_arg;
  Synthetic o;
  app.add_option("--sizes", sizes_arg, "sizes of tracked memory, synthetic (comma-separated)");
  app.add_option("--steps", o.steps, "steady-state steps measured per size (5 s apart)")
      ->check(CLI::Range(1, 1000));
  app.add_option("--targets", o.targets, "processes the memory is spread over")
      ->check(CLI::Range(1, 4096));
  app.add_option("--hot-share", o.hot_share, "share of the sequences read at every step")
      ->check(CLI::Range(0.0, 0.5));
  app.add_option("--hot-bytes", hot_bytes_arg,
                 "hot and warm memory fixed at this size whatever the size (the added memory "
                 "is cold)");
  app.add_option("--samples", o.samples, "page samples per step (all targets)");
  app.add_option("--real", real_arg, "also a real run: a child with this much memory");
  app.add_flag("--kernel-moves", o.kernel_moves,
               "the kernel demotes elsewhere between steps: the residency check reads every page "
               "with evidence");
  app.add_flag("--drawn-shares", o.drawn_shares,
               "each sequence's kind drawn on its own, as before 2026-12-07-28 (the shares "
               "then hold only on average)");
  CLI11_PARSE(app, argc, argv);
  spdlog::set_level(spdlog::level::warn);  // the loop's own lines: only what goes wrong

  const auto sizes = parse_sizes(sizes_arg);
  if (!sizes) return 2;
  std::optional<std::uint64_t> hot_bytes;
  if (!hot_bytes_arg.empty()) {
    hot_bytes = parse_size(hot_bytes_arg);
    if (!hot_bytes) {
      fmt::print(stderr, "scale_bench: --hot-bytes: '{}' is not a size\n", hot_bytes_arg);
      return 2;
    }
  }
  print_intro(o, hot_bytes);
  print_header();
  Measured done;
  const bool failed = run_sizes(*sizes, o, hot_bytes, done);
  print_growth(done);
  const int real = real_arg.empty() ? 0 : real_row(real_arg, o, done);
  if (real == 2) return 2;
  return failed || real != 0 ? 1 : 0;
}

}  // namespace
}  // namespace kvtier::bench

int main(int argc, char** argv) {
  try {
    return kvtier::bench::run(argc, argv);
  } catch (const std::exception& e) {
    std::fputs(fmt::format("scale_bench: {}\n", e.what()).c_str(), stderr);
    return 2;
  }
}
