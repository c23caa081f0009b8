#pragma once
// kvtierctl's side of the control socket: connect, send one request, wait for
// its reply with a deadline. Every failure is one line that says what to do.

#include <chrono>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string_view>

#include "agent/daemon/control_protocol.hpp"
#include "policy/error.hpp"

namespace kvtier::agent {

class ControlClient {
 public:
  static Result<ControlClient> connect(const std::filesystem::path& path);
  ~ControlClient();
  ControlClient(ControlClient&& other) noexcept;
  ControlClient& operator=(ControlClient&& other) noexcept;
  ControlClient(const ControlClient&) = delete;
  ControlClient& operator=(const ControlClient&) = delete;

  // Sends `command` and returns its result; the daemon's error message when it
  // refused; a timeout or a closed connection as an error naming the socket.
  Result<nlohmann::json> call(std::string_view command,
                              const nlohmann::json& args = nlohmann::json::object(),
                              std::chrono::milliseconds timeout = std::chrono::seconds(5));

 private:
  ControlClient(int fd, std::filesystem::path path)
      : fd_(fd), path_(std::move(path)), in_(kMaxResponseBytes) {}

  int fd_ = -1;
  std::filesystem::path path_;
  LineReader in_;
};

// The one-line message for a failed connect(): the errno text plus a hint
// (is kvtierd running? which group may connect?).
std::string connect_error_message(const std::filesystem::path& path, int err);

}  // namespace kvtier::agent
