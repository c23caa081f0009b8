#include "agent/ctl/ask.hpp"

#include <functional>
#include <iostream>
#include <string>

#include "agent/ctl/command.hpp"
#include "agent/daemon/control_client.hpp"

namespace kvtier::agent::ctl {

void ask(Globals& g, const std::string& name, const std::string& command,
         const std::function<void(const nlohmann::json&)>& print, const nlohmann::json& args) {
  auto client = ControlClient::connect(g.socket_path());
  if (!client) {
    std::cerr << "kvtierctl " << name << ": " << client.error().message << '\n';
    g.exit_code = kExitNoDaemon;
    return;
  }
  auto result = client->call(command, args);
  if (!result) {
    std::cerr << "kvtierctl " << name << ": " << result.error().message << '\n';
    g.exit_code =
        result.error().message.starts_with("permission denied") ? kExitNoDaemon : kExitFailed;
    return;
  }
  print(*result);
}

}  // namespace kvtier::agent::ctl
