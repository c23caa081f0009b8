#include "agent/daemon/view_commands.hpp"

#include <algorithm>
#include <cstddef>
#include <memory>
#include <nlohmann/json.hpp>
#include <utility>

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

Result<Pid> pid_of(const json& args) {
  if (!args.is_object() || !args.contains("pid") || !args["pid"].is_number_integer()) {
    return fail("missing integer argument 'pid'");
  }
  return args["pid"].get<Pid>();
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
        std::size_t bins = kHistoryBins;
        if (args.contains("bins") && args["bins"].is_number_unsigned()) {
          bins = std::clamp<std::size_t>(args["bins"].get<std::size_t>(), 1, 4096);
        }
        return heatmap(controller->state(), *pid, bins, clock());
      });
}

}  // namespace kvtier::agent
