#pragma once
// How kvtierctl's subcommands plug in: each lives in its own file and registers
// itself with an explicit add_*_command() call from kvtierctl.cpp. A command
// runs in its CLI11 callback and stores its exit status in `Globals::exit_code`.

#include <CLI/CLI.hpp>
#include <string>

#include "agent/host/host_paths.hpp"

namespace kvtier::agent::ctl {

inline constexpr int kExitOk = 0;
inline constexpr int kExitFailed = 1;    // the command failed; the message says why
inline constexpr int kExitUsage = 2;     // unknown command or flag
inline constexpr int kExitNoDaemon = 3;  // kvtierd is not running or refused the connection

struct Globals {
  std::string root;    // --root: read DIR/proc and DIR/sys instead
  std::string socket;  // --socket: the daemon's control socket
  int exit_code = kExitOk;

  [[nodiscard]] std::string socket_path() const {
    return socket.empty() ? std::string("/run/kvtier/kvtierd.sock") : socket;
  }
  [[nodiscard]] HostPaths paths() const {
    return root.empty() ? HostPaths{} : HostPaths::under(root);
  }
};

void add_nodes_command(CLI::App& app, Globals& g);
void add_config_command(CLI::App& app, Globals& g);
// status, dump, pause, resume: ask the running daemon over its control socket.
void add_daemon_commands(CLI::App& app, Globals& g);
void add_kv_size_command(CLI::App& app, Globals& g);
// targets, top, explain, heatmap: the control loop's view, from the daemon.
void add_loop_commands(CLI::App& app, Globals& g);
void add_sources_command(CLI::App& app, Globals& g);
// record start|stop|status: the daemon's recording of its steps.
void add_record_command(CLI::App& app, Globals& g);
// replay: a recording through the planner with another config (no daemon).
void add_replay_command(CLI::App& app, Globals& g);
// launch --node N [--preferred] -- COMMAND: a command under a NUMA memory policy.
void add_launch_command(CLI::App& app, Globals& g);

}  // namespace kvtier::agent::ctl
