// kvtierctl: the operator's command-line tool.
//
// Exit codes: 0 success, 1 the command failed (the message says why),
// 2 bad usage (unknown command or flag), 3 kvtierd not reachable.

#include <CLI/CLI.hpp>
#include <exception>
#include <iostream>
#include <string>

#include "agent/ctl/command.hpp"

namespace {

namespace ctl = kvtier::agent::ctl;

int run(int argc, char** argv) {
  CLI::App app{"kvtierctl: inspect and steer kvtier, the KV-cache memory tiering daemon"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("kvtierctl ") + KVTIER_VERSION);
  ctl::Globals g;
  app.add_option("--root", g.root,
                 "Read /proc and /sys under DIR/proc and DIR/sys instead (for fixtures and tests)")
      ->option_text("DIR");
  app.add_option("--socket", g.socket, "The daemon's control socket")
      ->option_text("PATH")
      ->default_str("/run/kvtier/kvtierd.sock");
  app.footer("Exit status: 0 success, 1 the command failed, 2 bad usage, 3 kvtierd not reachable.");

  // Explicit registration, one line per command.
  ctl::add_nodes_command(app, g);
  ctl::add_config_command(app, g);
  ctl::add_daemon_commands(app, g);
  ctl::add_kv_size_command(app, g);
  ctl::add_loop_commands(app, g);
  ctl::add_sources_command(app, g);
  ctl::add_record_command(app, g);
  ctl::add_replay_command(app, g);
  ctl::add_launch_command(app, g);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? ctl::kExitOk : ctl::kExitUsage;
  }
  return g.exit_code;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::cerr << "kvtierctl: " << e.what() << '\n';
    return ctl::kExitFailed;
  }
}
