#include "bench/probe/proc_text.hpp"

#include <fmt/format.h>
#include <charconv>

namespace kvtier::bench {

namespace {

bool parse_u64(std::string_view s, std::uint64_t& out) {
  const auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc{} && p == s.data() + s.size();
}

}  // namespace

std::map<std::string, std::uint64_t> parse_vmstat(std::string_view text,
                                                  std::span<const std::string> prefixes) {
  std::map<std::string, std::uint64_t> out;
  while (!text.empty()) {
    const std::size_t nl = text.find('\n');
    const std::string_view line = text.substr(0, nl);
    text = nl == std::string_view::npos ? std::string_view{} : text.substr(nl + 1);
    const std::size_t sp = line.find(' ');
    if (sp == std::string_view::npos) continue;
    const std::string_view name = line.substr(0, sp);
    bool wanted = prefixes.empty();
    for (const std::string& p : prefixes) wanted = wanted || name.starts_with(p);
    std::uint64_t v = 0;
    if (wanted && parse_u64(line.substr(sp + 1), v)) out.emplace(name, v);
  }
  return out;
}

Result<ProcCpu> parse_proc_stat(std::string_view text) {
  const std::size_t open = text.find('(');
  const std::size_t close = text.rfind(')');
  if (open == std::string_view::npos || close == std::string_view::npos || close < open) {
    return fail("/proc/PID/stat: no '(comm)' field");
  }
  ProcCpu cpu{.comm = std::string(text.substr(open + 1, close - open - 1))};
  // After ')': state(3) ppid pgrp session tty_nr tpgid flags minflt cminflt majflt cmajflt
  // utime(14) stime(15), counting fields from 1 as proc(5) does.
  std::string_view rest = text.substr(close + 1);
  std::vector<std::string_view> fields;
  while (!rest.empty() && fields.size() < 13) {
    const std::size_t b = rest.find_first_not_of(' ');
    if (b == std::string_view::npos) break;
    rest = rest.substr(b);
    const std::size_t e = rest.find_first_of(" \n");
    fields.push_back(rest.substr(0, e));
    rest = e == std::string_view::npos ? std::string_view{} : rest.substr(e);
  }
  if (fields.size() < 13 || !parse_u64(fields[7], cpu.minflt) ||
      !parse_u64(fields[11], cpu.utime_ticks) || !parse_u64(fields[12], cpu.stime_ticks)) {
    return fail(fmt::format(
        "/proc/PID/stat of '{}': minflt/utime/stime (fields 10, 14, 15) unreadable", cpu.comm));
  }
  return cpu;
}

NodeSummary summarize_nodes(std::span<const int> status, bool with_runs) {
  NodeSummary s;
  for (const int st : status) {
    ++s.pages[st];
    if (!with_runs) continue;
    if (!s.runs.empty() && s.runs.back().first == st) {
      ++s.runs.back().second;
    } else {
      s.runs.emplace_back(st, 1);
    }
  }
  return s;
}

}  // namespace kvtier::bench
