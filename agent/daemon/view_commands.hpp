#pragma once
// The control socket's commands about the loop's view: targets, explain and
// heatmap. Each reads the clock once, here at the edge, and asks views.hpp.

#include <memory>

#include "agent/daemon/daemon.hpp"
#include "agent/host/clock.hpp"
#include "agent/loop/controller.hpp"

namespace kvtier::agent {

void register_view_commands(Daemon& daemon, const std::shared_ptr<const Controller>& controller,
                            const Clock& clock = monotonic_now);

}  // namespace kvtier::agent

namespace kvtier::agent {

// `record` (args: action "start" with path, max_bytes, max_seconds; "stop";
// "status"): the loop's recording (Recorder::start). The reply
// says the file, its size, records, and the recording's CPU time against the
// daemon's since the recording started.
void register_record_command(Daemon& daemon, const std::shared_ptr<Controller>& controller,
                             const Clock& clock = monotonic_now);

}  // namespace kvtier::agent
