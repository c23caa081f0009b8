#pragma once
// How kvtierctl's daemon commands call kvtierd over its control socket.

#include <functional>
#include <nlohmann/json.hpp>
#include <string>

#include "agent/ctl/command.hpp"

namespace kvtier::agent::ctl {

// Calls `command` with `args` and hands the result to `print`; on failure
// prints one line naming the command and sets the exit code.
void ask(Globals& g, const std::string& name, const std::string& command,
         const std::function<void(const nlohmann::json&)>& print,
         const nlohmann::json& args = nlohmann::json::object());

// j[key] as T, or `fallback` when missing, null or of another type.
template <class T>
T get_or(const nlohmann::json& j, const char* key, T fallback) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  try {
    return it->get<T>();
  } catch (const nlohmann::json::exception&) {
    return fallback;
  }
}

}  // namespace kvtier::agent::ctl
