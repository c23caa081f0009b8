#pragma once
// How `kvtierctl status` shows the daemon's answer to a person: what runs and
// why, whether moves happen, reloads, what is degraded, endpoints.

#include <nlohmann/json.hpp>

namespace kvtier::agent::ctl {

// Prints `st` (the daemon's `status` reply) to stdout.
void print_status(const nlohmann::json& st);

}  // namespace kvtier::agent::ctl
