#include "bench/kvsim/trace.hpp"

#include <fmt/format.h>
#include <algorithm>
#include <cerrno>
#include <charconv>
#include <fstream>
#include <nlohmann/json.hpp>

#include "bench/kvsim/model_shape.hpp"

namespace kvtier::bench {

Result<TraceFormat> parse_trace_format(std::string_view name) {
  if (name == "mooncake") return TraceFormat::kMooncake;
  if (name == "azure") return TraceFormat::kAzure;
  return fail(fmt::format("unknown trace format '{}'; use mooncake or azure", name));
}

Result<TraceFormat> trace_format_from_path(const std::filesystem::path& path) {
  const std::string ext = path.extension().string();
  if (ext == ".jsonl" || ext == ".json") return TraceFormat::kMooncake;
  if (ext == ".csv") return TraceFormat::kAzure;
  return fail(
      fmt::format("{}: cannot tell the trace format from the extension '{}'; pass "
                  "--trace-format mooncake|azure",
                  path.string(), ext));
}

std::string_view trace_format_name(TraceFormat f) {
  return f == TraceFormat::kMooncake ? "mooncake" : "azure";
}

namespace {

template <class T>
bool parse_uint(std::string_view s, T& out) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r'))
    s.remove_suffix(1);
  if (s.empty()) return false;
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc{} && ptr == s.data() + s.size();
}

bool blank(std::string_view line) {
  return std::all_of(line.begin(), line.end(),
                     [](char c) { return c == ' ' || c == '\t' || c == '\r'; });
}

// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's civil algorithm).
std::int64_t days_from_civil(std::int64_t y, unsigned m, unsigned d) {
  y -= m <= 2 ? 1 : 0;
  const std::int64_t era = (y >= 0 ? y : y - 399) / 400;
  const auto yoe = static_cast<unsigned>(y - era * 400);
  const unsigned doy = (153 * (m > 2 ? m - 3 : m + 9) + 2) / 5 + d - 1;
  const unsigned doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return era * 146097 + static_cast<std::int64_t>(doe) - 719468;
}

Result<std::uint32_t> json_u32(const nlohmann::json& obj, const char* key,
                               const std::string& where) {
  auto it = obj.find(key);
  if (it == obj.end()) return fail(fmt::format("{}: missing \"{}\"", where, key));
  if (!it->is_number_unsigned() && !(it->is_number_integer() && it->get<std::int64_t>() >= 0)) {
    return fail(
        fmt::format("{}: \"{}\" must be a non-negative integer, found {}", where, key, it->dump()));
  }
  const auto v = it->get<std::uint64_t>();
  if (v > 0xffffffffULL) return fail(fmt::format("{}: \"{}\" = {} is too large", where, key, v));
  return static_cast<std::uint32_t>(v);
}

void sort_by_arrival(Trace& t) {
  std::stable_sort(t.requests.begin(), t.requests.end(),
                   [](const Request& a, const Request& b) { return a.arrival_s < b.arrival_s; });
  if (t.requests.empty()) return;
  const double t0 = t.requests.front().arrival_s;
  for (Request& r : t.requests) r.arrival_s -= t0;
}

}  // namespace

Result<Trace> parse_mooncake(std::istream& in, const std::string& source) {
  Trace trace{.source = source, .format = TraceFormat::kMooncake};
  std::string line;
  std::uint32_t lineno = 0;
  while (std::getline(in, line)) {
    ++lineno;
    if (blank(line)) continue;
    const std::string where = fmt::format("{}:{}", source, lineno);
    nlohmann::json obj = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (obj.is_discarded() || !obj.is_object()) {
      return fail(
          fmt::format("{}: not a JSON object; expected {{\"timestamp\": ms, "
                      "\"input_length\": n, \"output_length\": n, \"hash_ids\": [..]}}",
                      where));
    }
    auto ts = obj.find("timestamp");
    if (ts == obj.end() || !ts->is_number() || ts->get<double>() < 0) {
      return fail(
          fmt::format("{}: \"timestamp\" (milliseconds, >= 0) missing or not a number", where));
    }
    auto input = json_u32(obj, "input_length", where);
    if (!input) return std::unexpected(input.error());
    auto output = json_u32(obj, "output_length", where);
    if (!output) return std::unexpected(output.error());
    auto ids = obj.find("hash_ids");
    if (ids == obj.end() || !ids->is_array()) {
      return fail(fmt::format("{}: \"hash_ids\" missing or not an array", where));
    }
    Request r{.arrival_s = ts->get<double>() / 1000.0,
              .input_tokens = *input,
              .output_tokens = *output,
              .line = lineno};
    r.hash_ids.reserve(ids->size());
    for (const auto& id : *ids) {
      if (!id.is_number_unsigned() && !(id.is_number_integer() && id.get<std::int64_t>() >= 0)) {
        return fail(fmt::format("{}: hash id {} is not a non-negative integer", where, id.dump()));
      }
      r.hash_ids.push_back(id.get<std::uint64_t>());
    }
    const std::size_t want = (std::size_t{*input} + kHashBlockTokens - 1) / kHashBlockTokens;
    if (r.hash_ids.size() != want) {
      return fail(
          fmt::format("{}: {} hash ids for input_length {}; expected {} (one per {} tokens)", where,
                      r.hash_ids.size(), *input, want, kHashBlockTokens));
    }
    trace.requests.push_back(std::move(r));
  }
  if (in.bad()) return fail(fmt::format("{}: read error after line {}", source, lineno));
  if (trace.requests.empty()) return fail(fmt::format("{}: no requests in the trace", source));
  sort_by_arrival(trace);
  return trace;
}

Result<double> parse_azure_timestamp(std::string_view text) {
  // YYYY-MM-DD HH:MM:SS[.fraction]
  const auto bad = [&] {
    return fail(fmt::format("bad timestamp '{}'; expected YYYY-MM-DD HH:MM:SS.fraction", text));
  };
  while (!text.empty() && (text.back() == ' ' || text.back() == '\r')) text.remove_suffix(1);
  if (text.size() < 19 || text[4] != '-' || text[7] != '-' ||
      (text[10] != ' ' && text[10] != 'T') || text[13] != ':' || text[16] != ':') {
    return bad();
  }
  std::int64_t year = 0;
  unsigned month = 0;
  unsigned day = 0;
  unsigned hour = 0;
  unsigned minute = 0;
  unsigned second = 0;
  if (!parse_uint(text.substr(0, 4), year) || !parse_uint(text.substr(5, 2), month) ||
      !parse_uint(text.substr(8, 2), day) || !parse_uint(text.substr(11, 2), hour) ||
      !parse_uint(text.substr(14, 2), minute) || !parse_uint(text.substr(17, 2), second) ||
      month < 1 || month > 12 || day < 1 || day > 31 || hour > 23 || minute > 59 || second > 60) {
    return bad();
  }
  double frac = 0;
  if (text.size() > 19) {
    if (text[19] != '.' || text.size() == 20) return bad();
    double scale = 0.1;
    for (char c : text.substr(20)) {
      if (c < '0' || c > '9') return bad();
      frac += scale * (c - '0');
      scale /= 10;
    }
  }
  const std::int64_t days = days_from_civil(year, month, day);
  const std::int64_t secs =
      days * 86400 + std::int64_t{hour} * 3600 + std::int64_t{minute} * 60 + second;
  return static_cast<double>(secs) + frac;
}

Result<Trace> parse_azure(std::istream& in, const std::string& source) {
  Trace trace{.source = source, .format = TraceFormat::kAzure};
  std::string line;
  std::uint32_t lineno = 0;
  bool header_seen = false;
  while (std::getline(in, line)) {
    ++lineno;
    if (blank(line)) continue;
    const std::string where = fmt::format("{}:{}", source, lineno);
    if (!header_seen) {
      header_seen = true;
      if (line.starts_with("TIMESTAMP")) continue;
    }
    const std::size_t c1 = line.find(',');
    const std::size_t c2 = c1 == std::string::npos ? c1 : line.find(',', c1 + 1);
    if (c2 == std::string::npos || line.find(',', c2 + 1) != std::string::npos) {
      return fail(fmt::format(
          "{}: expected 3 comma-separated fields TIMESTAMP,ContextTokens,GeneratedTokens", where));
    }
    const std::string_view sv(line);
    auto ts = parse_azure_timestamp(sv.substr(0, c1));
    if (!ts) return fail(fmt::format("{}: {}", where, ts.error().message));
    Request r{.arrival_s = *ts, .line = lineno};
    if (!parse_uint(sv.substr(c1 + 1, c2 - c1 - 1), r.input_tokens)) {
      return fail(fmt::format("{}: ContextTokens '{}' is not a non-negative integer", where,
                              sv.substr(c1 + 1, c2 - c1 - 1)));
    }
    if (!parse_uint(sv.substr(c2 + 1), r.output_tokens)) {
      return fail(fmt::format("{}: GeneratedTokens '{}' is not a non-negative integer", where,
                              sv.substr(c2 + 1)));
    }
    trace.requests.push_back(std::move(r));
  }
  if (in.bad()) return fail(fmt::format("{}: read error after line {}", source, lineno));
  if (trace.requests.empty()) return fail(fmt::format("{}: no requests in the trace", source));
  sort_by_arrival(trace);
  return trace;
}

Result<Trace> read_trace(const std::filesystem::path& path, TraceFormat format) {
  std::ifstream in(path);
  if (!in) {
    const int err = errno;
    return fail(fmt::format("{}: cannot open trace: {}", path.string(), errno_text(err)), err);
  }
  return format == TraceFormat::kMooncake ? parse_mooncake(in, path.string())
                                          : parse_azure(in, path.string());
}

}  // namespace kvtier::bench
