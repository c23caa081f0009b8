// kvtierctl: the operator's command-line tool.
//
// Exit codes: 0 success, 1 the command failed (the message says why),
// 2 bad usage (unknown command or flag).

#include <CLI/CLI.hpp>
#include <cstdio>
#include <iostream>
#include <string>

#include "agent/host_paths.hpp"
#include "agent/nodes_report.hpp"
#include "agent/topology_reader.hpp"

namespace {

constexpr int kExitFailed = 1;
constexpr int kExitUsage = 2;

int run(int argc, char** argv) {
  CLI::App app{"kvtierctl: inspect and steer kvtier, the KV-cache memory tiering daemon"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("kvtierctl ") + KVTIER_VERSION);
  std::string root;
  app.add_option("--root", root,
                 "Read /proc and /sys under DIR/proc and DIR/sys instead (for fixtures and tests)")
      ->option_text("DIR");
  app.footer("Exit status: 0 success, 1 the command failed, 2 bad usage.");

  bool json = false;
  auto* nodes = app.add_subcommand(
      "nodes",
      "Show NUMA nodes: CPUs, memory, distances, HMAT latency/bandwidth, memory tier, and which "
      "nodes kvtier demotes cold pages to, and why");
  nodes->add_flag("--json", json, "Print JSON instead of a table");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? 0 : kExitUsage;
  }

  const kvtier::agent::HostPaths paths =
      root.empty() ? kvtier::agent::HostPaths{} : kvtier::agent::HostPaths::under(root);

  if (nodes->parsed()) {
    auto topo = kvtier::agent::read_topology(paths);
    if (!topo) {
      std::cerr << "kvtierctl nodes: " << topo.error().message << '\n';
      return kExitFailed;
    }
    if (json) {
      std::cout << kvtier::agent::nodes_json(*topo).dump(2) << '\n';
    } else {
      std::cout << kvtier::agent::nodes_table(*topo);
    }
    return 0;
  }
  return kExitUsage;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fputs((std::string("kvtierctl: ") + e.what() + "\n").c_str(), stderr);
    return 1;
  }
}
