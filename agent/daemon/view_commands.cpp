#include "agent/daemon/view_commands.hpp"

#include <cstddef>
#include <cstdint>
#include <expected>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <utility>

#include "agent/daemon/control_protocol.hpp"
#include "agent/daemon/control_server.hpp"
#include "agent/daemon/controller.hpp"
#include "agent/daemon/daemon.hpp"
#include "agent/daemon/views.hpp"
#include "agent/host/clock.hpp"
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

}  // namespace kvtier::agent
