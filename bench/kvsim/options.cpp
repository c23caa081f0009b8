#include "bench/kvsim/options.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cerrno>
#include <iostream>
#include <optional>

#include "policy/error.hpp"

namespace kvtier::bench::kvsim {
namespace {

// The trace and the model, and how they are scaled to the budget.
void add_model_options(CLI::App& app, Options& o) {
  app.add_option("--trace", o.trace, "Request trace: Mooncake .jsonl or Azure .csv")
      ->capture_default_str()
      ->check(CLI::ExistingFile);
  app.add_option("--trace-format", o.trace_format, "mooncake|azure (default: by extension)")
      ->check(CLI::IsMember({"mooncake", "azure"}));
  app.add_option("--preset", o.preset, "Model: llama3-8b|llama3-70b")->capture_default_str();
  app.add_option("--layers", o.layers, "Override the model's layer count");
  app.add_option("--kv-heads", o.kv_heads, "Override the model's KV heads");
  app.add_option("--head-dim", o.head_dim, "Override the model's head dimension");
  app.add_option("--dtype", o.dtype, "Override the KV dtype: fp16|bf16|fp8|fp32");
  app.add_option("--kv-budget", o.budget, "Memory for the KV pool, e.g. 256MiB, 1GiB")
      ->capture_default_str();
  app.add_option("--capacity-tokens", o.capacity_tokens,
                 "KV capacity of the modelled server in real tokens; scaled to fit the budget")
      ->capture_default_str();
  app.add_option("--layer-scale", o.layer_scale, "Force: real layers per simulated layer");
  app.add_option("--token-scale", o.token_scale,
                 "Force: real tokens per simulated token (1,2,4,8,16,32)");
}

// How fast the trace plays, how decode runs, and the pool's pages.
void add_run_options(CLI::App& app, Options& o) {
  app.add_option("--time-scale", o.time_scale,
                 "Wall seconds per trace second (0.05 plays an hour in 3 minutes)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--duration", o.duration_s, "Stop after S seconds (0: when the trace ends)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_flag("--loop", o.loop, "Replay the trace when it ends");
  app.add_option("--max-batch", o.max_batch, "Running sequences at most")
      ->capture_default_str()
      ->check(CLI::Range(1U, 100000U));
  app.add_option("--seed", o.seed, "Pattern seed")->capture_default_str();
  app.add_option("--lines-per-page", o.lines_per_page,
                 "64-byte lines checked per 4 KiB page on each read (64: every byte)")
      ->capture_default_str()
      ->check(CLI::Range(1U, 64U));
  app.add_flag("--flush-tlb", o.flush_tlb,
               "Flush this process's TLB after every decode step (for QEMU TCG guests, whose "
               "software TLB otherwise hides every access from DAMON)");
  auto* huge = app.add_flag("--hugepages", o.hugepages, "madvise(MADV_HUGEPAGE) the pool");
  app.add_flag("--no-hugepages", o.no_hugepages,
               "madvise(MADV_NOHUGEPAGE) the pool: 4 KiB pages even where transparent huge pages "
               "are \"always\" (a 2 MiB page holds chunks of 64 blocks, which then move together)")
      ->excludes(huge);
  app.add_flag("--no-populate", o.no_populate, "Do not fault the pool in at start");
  app.add_option("--decode-ms", o.decode_ms,
                 "Trace time of one real decode iteration; a simulated step is paced to "
                 "decode-ms x token-scale x time-scale of wall time (0: flat out)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_option("--prefill-ms", o.prefill_ms,
                 "Trace time of the prefill pass that admits new sequences (default: --decode-ms): "
                 "kvsim waits this x time-scale between admitting them and the decode step that "
                 "first reads their blocks, as an engine's next pass comes after the prefill's "
                 "(0: in the same instant)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--step-ms", o.step_ms,
                 "Minimum wall time of a decode step, instead of the one --decode-ms gives "
                 "(0: flat out)")
      ->check(CLI::NonNegativeNumber);
}

// What kvsim writes: ground truth, stats lines, and the measurements they carry.
void add_output_options(CLI::App& app, Options& o) {
  app.add_option("--truth", o.truth,
                 "Write per-block ground truth here at the end and on SIGUSR1 (.csv or JSON)");
  app.add_option("--live-truth", o.live_truth,
                 "Keep every block's last access time in FILE, a shared mapping another process "
                 "(the benchmark's oracle) reads while kvsim runs (bench/kvsim/live_truth.hpp)");
  app.add_option("--truth-record", o.truth_record,
                 "Write the bytes decode reads from each chunk (a block in one tensor) of the "
                 "pool, per window, to FILE as a kvtier recording (accesses records; a new "
                 "file): ground truth for kvtierctl replay --truth (docs/recording.md)");
  app.add_option("--truth-window", o.truth_window_s, "Seconds per --truth-record window")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--stats", o.stats, "Write stats lines here instead of stdout");
  app.add_option("--stats-interval", o.stats_interval_s, "Seconds between stats lines")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--cold-ages", o.cold_ages, "Ages (s) for the cold_bytes figures")
      ->delimiter(',')
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--inject-corruption", o.inject_after,
                 "Fault injection: flip one byte of a block in use after N decode steps "
                 "(the run must then fail with status 3)");
  app.add_option("--read-nodes-every", o.read_nodes_every,
                 "Every N decode steps, ask the kernel (move_pages) which NUMA node holds each "
                 "page the step reads and count the read bytes per node (0: never)")
      ->capture_default_str();
  app.add_option("--reaction-window", o.reaction_window_s,
                 "Seconds: --read-nodes-every also counts, per node, the bytes of blocks whose "
                 "episode of use (filled anew, or back after the shortest --cold-ages idle) began "
                 "at least this long before the read (late_by_node)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_option("--idle-threads", o.idle_threads,
                 "Start N threads that only wait, as an inference server has many (with one "
                 "thread the kernel's NUMA scan leaves kvsim's pages on its own node mapped, so "
                 "reads of them cause no NUMA hint fault)")
      ->capture_default_str()
      ->check(CLI::Range(0U, 1024U));
}

}  // namespace

std::optional<int> parse_command_line(int argc, char** argv, Options& o) {
  CLI::App app{"kvsim: a paged KV-cache workload simulator driven by LLM serving traces"};
  add_model_options(app, o);
  add_run_options(app, o);
  add_output_options(app, o);
  app.footer("Exit status: 0 success, 1 error, 2 bad usage, 3 corrupted KV data found.");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? kExitOk : kExitUsage;
  }
  if (app.count("--trace") == 0 && access(o.trace.c_str(), R_OK) != 0) {
    const int err = errno;
    std::cerr << fmt::format(
        "kvsim: no --trace given, and the default trace {} cannot be read ({}); pass --trace "
        "FILE (the repository ships its traces in bench/traces/)\n",
        o.trace, kvtier::errno_text(err));
    return kExitUsage;
  }
  return std::nullopt;
}

}  // namespace kvtier::bench::kvsim
