// kvtier_page_nodes PID START END [START END ...]: where the pages of each
// range of a process are, by move_pages(2) status query, as one JSON line per
// range: {"start":..,"end":..,"nodes":{"0":bytes,...},"not_present":bytes}.
// The daemon's vm test checks kvtierd's placement with it.

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "agent/host/residency.hpp"

int main(int argc, char** argv) {
  if (argc < 4 || (argc - 2) % 2 != 0) {
    std::fprintf(stderr, "usage: kvtier_page_nodes PID START END [START END ...]\n");
    return 2;
  }
  const auto pid = static_cast<kvtier::Pid>(std::strtol(argv[1], nullptr, 10));
  std::vector<kvtier::AddrRange> ranges;
  for (int i = 2; i + 1 < argc; i += 2) {
    ranges.push_back({std::strtoull(argv[i], nullptr, 0), std::strtoull(argv[i + 1], nullptr, 0)});
  }
  kvtier::agent::ResidencyReader reader;
  auto res = reader.read(pid, ranges);
  if (!res) {
    std::fprintf(stderr, "kvtier_page_nodes: %s\n", res.error().message.c_str());
    return 1;
  }
  for (const auto& r : *res) {
    std::string nodes;
    for (const auto& [node, bytes] : r.bytes_per_node) {
      nodes += (nodes.empty() ? "" : ",") + std::string("\"") + std::to_string(node) +
               "\":" + std::to_string(bytes);
    }
    std::printf("{\"start\":%llu,\"end\":%llu,\"nodes\":{%s},\"not_present\":%llu}\n",
                static_cast<unsigned long long>(r.range.start),
                static_cast<unsigned long long>(r.range.end), nodes.c_str(),
                static_cast<unsigned long long>(r.not_present_bytes));
  }
  return 0;
}
