#pragma once
// Pure parsers and summaries behind kvtier_residency_probe, kept apart from the syscalls so unit
// tests feed them text and status arrays.

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "policy/error.hpp"

namespace kvtier::bench {

// /proc/vmstat lines whose name starts with one of `prefixes` (all lines if none).
std::map<std::string, std::uint64_t> parse_vmstat(std::string_view text,
                                                  std::span<const std::string> prefixes);

struct ProcCpu {
  std::string comm;
  std::uint64_t utime_ticks = 0;
  std::uint64_t stime_ticks = 0;
  // Page faults that needed no I/O (among them NUMA hint faults and soft-dirty write faults).
  std::uint64_t minflt = 0;
};

// /proc/PID/stat: the comm may hold spaces and parentheses, so fields are counted from the
// last ')'. For a process, the times cover all its threads.
Result<ProcCpu> parse_proc_stat(std::string_view text);

// Node of each page as move_pages(2) reports it (node >= 0, or -errno), summarised.
struct NodeSummary {
  std::map<int, std::uint64_t> pages;               // by status: node id, or -errno
  std::vector<std::pair<int, std::uint64_t>> runs;  // run-length encoding, in address order
};
NodeSummary summarize_nodes(std::span<const int> status, bool with_runs);

}  // namespace kvtier::bench
