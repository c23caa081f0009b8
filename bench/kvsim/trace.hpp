#pragma once
// Request traces from production LLM services (see bench/traces/README.md):
//   Mooncake JSONL: {"timestamp": ms, "input_length": n, "output_length": n, "hash_ids": [..]},
//     one hash id per 512-token prefix block; equal leading ids mean a shared prefix.
//   Azure CSV: TIMESTAMP,ContextTokens,GeneratedTokens with "2023-11-16 18:15:46.6805900"
//     timestamps; lengths only, so no two requests share a prefix.
// Every malformed line is an error naming file:line and what was expected.

#include <cstdint>
#include <filesystem>
#include <istream>
#include <string>
#include <string_view>
#include <vector>

#include "policy/error.hpp"

namespace kvtier::bench {

enum class TraceFormat : std::uint8_t { kMooncake, kAzure };

struct Request {
  double arrival_s = 0;  // seconds since the first request of the trace
  std::uint32_t input_tokens = 0;
  std::uint32_t output_tokens = 0;
  std::vector<std::uint64_t> hash_ids;  // empty for traces without prefix information
  std::uint32_t line = 0;               // where it came from, for messages
};

struct Trace {
  std::string source;  // the file name
  TraceFormat format = TraceFormat::kMooncake;
  std::vector<Request> requests;  // sorted by arrival

  [[nodiscard]] double span_s() const { return requests.empty() ? 0.0 : requests.back().arrival_s; }
};

// "mooncake" or "azure".
Result<TraceFormat> parse_trace_format(std::string_view name);
// .jsonl -> Mooncake, .csv -> Azure; anything else is an error asking for --trace-format.
Result<TraceFormat> trace_format_from_path(const std::filesystem::path& path);
std::string_view trace_format_name(TraceFormat f);

// `source` names the stream in messages (usually the file path).
Result<Trace> parse_mooncake(std::istream& in, const std::string& source);
Result<Trace> parse_azure(std::istream& in, const std::string& source);
Result<Trace> read_trace(const std::filesystem::path& path, TraceFormat format);

// "2023-11-16 18:15:46.6805900" -> seconds since 1970 (UTC, no leap seconds).
Result<double> parse_azure_timestamp(std::string_view text);

}  // namespace kvtier::bench
