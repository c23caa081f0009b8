// kvtierd: the kvtier daemon. This first version inspects the host and says
// which node it would demote to; the control loop arrives with the daemon issue.

#include <spdlog/spdlog.h>
#include <CLI/CLI.hpp>

#include <cstdio>
#include <exception>
#include <string>

#include "agent/host_paths.hpp"
#include "agent/topology_reader.hpp"
#include "policy/topology.hpp"

namespace {

int run(int argc, char** argv) {
  CLI::App app{"kvtierd: keeps hot KV-cache pages in DRAM and moves cold ones to CXL memory"};
  app.set_version_flag("--version", std::string("kvtierd ") + KVTIER_VERSION);
  std::string root;
  app.add_option("--root", root, "Read /proc and /sys under DIR (for tests)")->option_text("DIR");
  CLI11_PARSE(app, argc, argv);

  const auto paths =
      root.empty() ? kvtier::agent::HostPaths{} : kvtier::agent::HostPaths::under(root);
  auto topo = kvtier::agent::read_topology(paths);
  if (!topo) {
    spdlog::error("{}", topo.error().message);
    return 1;
  }
  bool any_target = false;
  for (const auto& role : kvtier::policy::classify_nodes(*topo)) {
    any_target = any_target || role.demotion_target;
    spdlog::info("node {}: {}", role.node, role.reason);
  }
  if (!any_target) spdlog::warn("no demotion target node on this host: observe-only mode");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fputs((std::string("kvtierd: ") + e.what() + "\n").c_str(), stderr);
    return 1;
  }
}
