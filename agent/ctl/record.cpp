// kvtierctl record start|stop|status: the daemon's recording of its steps
// (docs/recording.md), asked over the control socket.

#include <fmt/format.h>

#include <cstdint>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "agent/ctl/ask.hpp"
#include "agent/ctl/command.hpp"
#include "policy/units.hpp"

namespace kvtier::agent::ctl {
namespace {

using nlohmann::json;

void print_recording(const json& r) {
  if (!r.contains("path")) {
    fmt::print("no recording\n");
    return;
  }
  const bool on = get_or(r, "recording", false);
  const double rec_cpu = get_or(r, "recording_cpu_seconds", 0.0);
  const double daemon_cpu = get_or(r, "daemon_cpu_seconds", 0.0);
  fmt::print("{} {}: {} in {} records{}\n", on ? "recording to" : "recorded",
             get_or<std::string>(r, "path", "?"),
             policy::format_size(get_or<std::uint64_t>(r, "bytes", 0)),
             get_or<std::uint64_t>(r, "records", 0),
             on ? "" : fmt::format(" ({})", get_or<std::string>(r, "stopped_because", "?")));
  fmt::print("recording CPU {:.3f} s of the daemon's {:.3f} s since it started ({:.1f}%)\n",
             rec_cpu, daemon_cpu, daemon_cpu > 0 ? 100.0 * rec_cpu / daemon_cpu : 0.0);
}

}  // namespace

void add_record_command(CLI::App& app, Globals& g) {
  auto* rec = app.add_subcommand(
      "record", "Record what kvtierd's steps see, for `kvtierctl replay` (docs/recording.md)");
  rec->require_subcommand(1);
  {
    auto path = std::make_shared<std::string>();
    auto max_bytes = std::make_shared<std::string>("64MiB");
    auto max_seconds = std::make_shared<std::int64_t>(600);
    auto* start = rec->add_subcommand(
        "start",
        "Start recording into FILE (a new file, written by kvtierd: an absolute path "
        "it may write, e.g. under /var/lib/kvtier)");
    start->add_option("FILE", *path, "The recording to create")->required();
    start->add_option("--max-bytes", *max_bytes, "Stop at this size (e.g. 64MiB)")
        ->capture_default_str();
    start->add_option("--max-seconds", *max_seconds, "Stop after this long")->capture_default_str();
    start->callback([&g, path, max_bytes, max_seconds] {
      auto bytes = policy::parse_size(*max_bytes);
      if (!bytes) {
        fmt::print(stderr, "kvtierctl record start: --max-bytes {}: {}\n", *max_bytes,
                   bytes.error());
        g.exit_code = kExitUsage;
        return;
      }
      const std::string abs = std::filesystem::absolute(*path).string();
      ask(g, "record start", "record", print_recording,
          json{{"action", "start"},
               {"path", abs},
               {"max_bytes", *bytes},
               {"max_seconds", *max_seconds}});
    });
  }
  for (const char* action : {"stop", "status"}) {
    auto* cmd = rec->add_subcommand(action, std::string(action) == "stop"
                                                ? "Stop the recording (the file stays)"
                                                : "Show the recording, its size and CPU cost");
    cmd->callback([&g, action] {
      ask(g, std::string("record ") + action, "record", print_recording, json{{"action", action}});
    });
  }
}

}  // namespace kvtier::agent::ctl
