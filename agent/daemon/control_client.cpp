#include "agent/daemon/control_client.hpp"

#include <fmt/format.h>
#include <grp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <string>
#include <string_view>
#include <utility>

#include "agent/daemon/control_protocol.hpp"
#include "policy/error.hpp"

namespace kvtier::agent {
namespace {

std::string socket_group(const std::filesystem::path& path) {
  struct stat st {};
  if (stat(path.c_str(), &st) != 0) return "";
  std::array<char, 16384> buf{};
  group gr{};
  group* found = nullptr;
  if (getgrgid_r(st.st_gid, &gr, buf.data(), buf.size(), &found) == 0 && found != nullptr) {
    return gr.gr_name;
  }
  return fmt::format("{}", st.st_gid);
}

int remaining_ms(std::chrono::steady_clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
      deadline - std::chrono::steady_clock::now());
  return left.count() < 0 ? 0 : static_cast<int>(left.count());
}

}  // namespace

std::string connect_error_message(const std::filesystem::path& path, int err) {
  std::string hint;
  switch (err) {
    case ENOENT:
      hint = " (is kvtierd running?)";
      break;
    case ECONNREFUSED:
      hint = " (kvtierd is not running; the socket file is stale)";
      break;
    case EACCES:
    case EPERM: {
      const auto grp = socket_group(path);
      hint = grp.empty() ? " (run as root or as a member of the socket's group)"
                         : fmt::format(" (run as root or as a member of group {})", grp);
      break;
    }
    default:
      break;
  }
  return fmt::format("cannot connect to {}: {}{}", path.string(), errno_text(err), hint);
}

Result<ControlClient> ControlClient::connect(const std::filesystem::path& path) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.native().size() >= sizeof addr.sun_path) {
    return fail(fmt::format("socket path {} is longer than {} bytes", path.string(),
                            sizeof addr.sun_path - 1));
  }
  std::memcpy(addr.sun_path, path.c_str(), path.native().size() + 1);
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    const int err = errno;
    return fail(fmt::format("socket(AF_UNIX): {}", errno_text(err)), err);
  }
  if (::connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0) {
    const int err = errno;
    close(fd);
    return fail(connect_error_message(path, err), err);
  }
  return ControlClient(fd, path);
}

ControlClient::~ControlClient() {
  if (fd_ >= 0) close(fd_);
}

ControlClient::ControlClient(ControlClient&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)), path_(std::move(other.path_)), in_(std::move(other.in_)) {}

ControlClient& ControlClient::operator=(ControlClient&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) close(fd_);
    fd_ = std::exchange(other.fd_, -1);
    path_ = std::move(other.path_);
    in_ = std::move(other.in_);
  }
  return *this;
}

Result<nlohmann::json> ControlClient::call(std::string_view command, const nlohmann::json& args,
                                           std::chrono::milliseconds timeout) {
  if (fd_ < 0) return fail("not connected");
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  const std::string req =
      encode_request(ControlRequest{.command = std::string(command), .args = args});
  std::array<char, 65536> buf{};
  std::size_t sent = 0;
  while (sent < req.size()) {
    pollfd p{.fd = fd_, .events = POLLOUT, .revents = 0};
    if (poll(&p, 1, remaining_ms(deadline)) <= 0) {
      return fail(fmt::format("kvtierd did not accept the request within {} ms on {}",
                              timeout.count(), path_.string()),
                  ETIMEDOUT);
    }
    const ssize_t n = send(fd_, req.data() + sent, req.size() - sent, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0) {
      const int err = errno;
      if (err == EAGAIN || err == EINTR) continue;
      // The daemon closes right after refusing a peer; its reason is already
      // waiting in our receive queue and says more than EPIPE.
      const ssize_t got = recv(fd_, buf.data(), buf.size(), MSG_DONTWAIT);
      if (got > 0) {
        in_.append(std::string_view(buf.data(), static_cast<std::size_t>(got)));
        if (auto line = in_.next_line()) return parse_response(*line);
      }
      return fail(fmt::format("sending to kvtierd on {}: {}", path_.string(), errno_text(err)),
                  err);
    }
    sent += static_cast<std::size_t>(n);
  }
  while (true) {
    if (auto line = in_.next_line()) return parse_response(*line);
    if (in_.overflowed()) {
      return fail(fmt::format("reply from kvtierd longer than {} bytes", kMaxResponseBytes));
    }
    pollfd p{.fd = fd_, .events = POLLIN, .revents = 0};
    const int ready = poll(&p, 1, remaining_ms(deadline));
    if (ready == 0) {
      return fail(
          fmt::format("no reply from kvtierd within {} ms on {}", timeout.count(), path_.string()),
          ETIMEDOUT);
    }
    if (ready < 0) {
      const int err = errno;
      if (err == EINTR) continue;
      return fail(fmt::format("poll: {}", errno_text(err)), err);
    }
    const ssize_t n = recv(fd_, buf.data(), buf.size(), MSG_DONTWAIT);
    if (n == 0) return fail(fmt::format("kvtierd closed the connection on {}", path_.string()));
    if (n < 0) {
      const int err = errno;
      if (err == EAGAIN || err == EINTR) continue;
      return fail(fmt::format("reading from kvtierd on {}: {}", path_.string(), errno_text(err)),
                  err);
    }
    in_.append(std::string_view(buf.data(), static_cast<std::size_t>(n)));
  }
}

}  // namespace kvtier::agent
