#include "agent/daemon/view_commands.hpp"

#include <cstddef>
#include <cstdint>
#include <expected>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>

#include "agent/daemon/control_protocol.hpp"
#include "agent/daemon/control_server.hpp"
#include "agent/daemon/daemon.hpp"
#include "agent/host/clock.hpp"
#include "agent/loop/controller.hpp"
#include "agent/loop/recording.hpp"
#include "agent/loop/views.hpp"
#include "policy/error.hpp"
#include "policy/types.hpp"

namespace kvtier::agent {
namespace {

using nlohmann::json;

constexpr std::int64_t kMaxBins = 4096;
// The kernel's PID_MAX_LIMIT (4 Mi), as the config's pid selector allows.
constexpr std::int64_t kMaxPid = 4194304;

// Range-checked before any narrowing: pid 4294967297 is refused, not taken as 1.
Result<Pid> pid_of(const json& args) {
  auto pid = integer_arg(args, "pid", std::nullopt, 1, kMaxPid);
  if (!pid) return std::unexpected(pid.error());
  return static_cast<Pid>(*pid);
}

json recording_json(const RecordingWriter* w, std::uint64_t daemon_cpu_at_start) {
  if (w == nullptr) return json{{"recording", false}};
  const std::uint64_t daemon_cpu = process_cpu_now() - daemon_cpu_at_start;
  return json{{"recording", w->open()},
              {"path", w->path().string()},
              {"bytes", w->bytes()},
              {"records", w->records()},
              {"stopped_because", w->stopped_because()},
              {"recording_cpu_seconds", static_cast<double>(w->cpu_ns()) / 1e9},
              {"daemon_cpu_seconds", static_cast<double>(daemon_cpu) / 1e9}};
}

}  // namespace

void register_view_commands(Daemon& daemon, const std::shared_ptr<const Controller>& controller,
                            const Clock& clock) {
  daemon.register_command("targets", [controller, clock](const json&, const PeerCred&) {
    return Result<json>(targets_json(controller->state(), clock()));
  });
  daemon.register_command("explain",
                          [controller, clock](const json& args, const PeerCred&) -> Result<json> {
                            auto pid = pid_of(args);
                            if (!pid) return std::unexpected(pid.error());
                            return explain(controller->state(), *pid, clock());
                          });
  daemon.register_command(
      "heatmap", [controller, clock](const json& args, const PeerCred&) -> Result<json> {
        auto pid = pid_of(args);
        if (!pid) return std::unexpected(pid.error());
        auto bins = integer_arg(args, "bins", kHistoryBins, 1, kMaxBins);
        if (!bins) return std::unexpected(bins.error());
        return heatmap(controller->state(), *pid, static_cast<std::size_t>(*bins), clock());
      });
}

void register_record_command(Daemon& daemon, const std::shared_ptr<Controller>& controller,
                             const Clock& clock) {
  auto cpu_at_start = std::make_shared<std::uint64_t>(process_cpu_now());
  daemon.register_command(
      "record",
      [controller, clock, cpu_at_start](const json& args, const PeerCred&) -> Result<json> {
        const std::string action = args.value("action", std::string("status"));
        if (action == "start") {
          if (!args.contains("path") || !args["path"].is_string()) {
            return fail("record start: the argument path (a string) is missing");
          }
          auto max_bytes = integer_arg(args, "max_bytes", 64LL << 20, 4096, 1LL << 40);
          if (!max_bytes) return std::unexpected(max_bytes.error());
          auto max_seconds = integer_arg(args, "max_seconds", 600, 1, 30LL * 24 * 3600);
          if (!max_seconds) return std::unexpected(max_seconds.error());
          const RecordingLimits limits{
              .max_bytes = static_cast<std::uint64_t>(*max_bytes),
              .max_duration = static_cast<TimeNs>(*max_seconds) * 1'000'000'000ULL};
          if (auto ok =
                  controller->recorder().start(args["path"].get<std::string>(), limits, clock());
              !ok) {
            return std::unexpected(ok.error());
          }
          *cpu_at_start = process_cpu_now();
        } else if (action == "stop") {
          controller->recorder().stop();
        } else if (action != "status") {
          return fail("record: action must be start, stop or status, not '" + action + "'");
        }
        return recording_json(controller->recorder().writer(), *cpu_at_start);
      });
}

}  // namespace kvtier::agent
