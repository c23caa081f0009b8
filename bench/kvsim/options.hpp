#pragma once
// kvsim's command line: every option, and the CLI11 definitions that fill them.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace kvtier::bench::kvsim {

// The Mooncake trace the repository ships (bench/traces), by its path in the source tree
// kvsim was built from.
constexpr const char* kDefaultTrace = KVTIER_KVSIM_DEFAULT_TRACE;

struct Options {
  bool flush_tlb = false;
  std::string trace = kDefaultTrace;
  std::string trace_format;
  std::string preset = "llama3-8b";
  std::optional<std::uint32_t> layers;
  std::optional<std::uint32_t> kv_heads;
  std::optional<std::uint32_t> head_dim;
  std::string dtype;
  std::string budget = "512MiB";
  std::uint64_t capacity_tokens = 2ULL << 20;
  std::optional<std::uint32_t> layer_scale;
  std::optional<std::uint32_t> token_scale;
  double time_scale = 1.0;
  double duration_s = 0;
  bool loop = false;
  std::uint32_t max_batch = 32;
  std::uint64_t seed = 1;
  std::uint32_t lines_per_page = 4;
  bool hugepages = false;
  bool no_hugepages = false;
  bool no_populate = false;
  double decode_ms = 30;
  std::optional<double> prefill_ms;  // nullopt: decode_ms
  std::optional<double> step_ms;
  std::string truth;
  std::string live_truth;
  std::string truth_record;
  double truth_window_s = 1.0;
  std::string stats;
  double stats_interval_s = 1.0;
  std::vector<double> cold_ages{10, 30};
  std::optional<std::uint64_t> inject_after;
  std::uint32_t read_nodes_every = 0;
  double reaction_window_s = 5.0;
  std::uint32_t idle_threads = 0;
};

constexpr int kExitOk = 0;
constexpr int kExitFailed = 1;
constexpr int kExitUsage = 2;
constexpr int kExitCorrupt = 3;

// The command line into `o`: the model, the run, the output. An exit status when kvsim ends
// here (--help; a bad option or no readable trace, with one line saying what to pass);
// std::nullopt to run.
std::optional<int> parse_command_line(int argc, char** argv, Options& o);

}  // namespace kvtier::bench::kvsim
