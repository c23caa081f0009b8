#pragma once
// The control socket's commands about the loop's view: targets, explain and
// heatmap. Each reads the clock once, here at the edge, and asks views.hpp.

#include <memory>

#include "agent/daemon/controller.hpp"
#include "agent/daemon/daemon.hpp"
#include "agent/host/clock.hpp"

namespace kvtier::agent {

void register_view_commands(Daemon& daemon, const std::shared_ptr<const Controller>& controller,
                            const Clock& clock = monotonic_now);

}  // namespace kvtier::agent
