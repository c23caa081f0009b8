#include "agent/daemon/control_server.hpp"

#include <fmt/format.h>
#include <grp.h>
#include <pwd.h>
#include <spdlog/spdlog.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <exception>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include "agent/daemon/control_protocol.hpp"
#include "agent/daemon/event_loop.hpp"
#include "agent/host/clock.hpp"
#include "policy/error.hpp"
#include "policy/types.hpp"

namespace kvtier::agent {
namespace {

using nlohmann::json;

constexpr int kListenBacklog = 16;
// Read at most this much per readiness event, so one busy client cannot
// starve the control loop's timer.
constexpr std::size_t kMaxReadPerEvent = std::size_t{256} << 10;
constexpr std::size_t kReplyHighWater = std::size_t{256} << 10;
// Connections accepted per readiness event: a connect flood takes turns with
// the step timer and the clients already in.
constexpr int kMaxAcceptsPerEvent = 64;

TimeNs ns(std::chrono::milliseconds ms) {
  return static_cast<TimeNs>(std::chrono::nanoseconds(ms).count());
}

Result<sockaddr_un> unix_address(const std::filesystem::path& path) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  const std::string& s = path.native();
  if (s.empty() || s.size() >= sizeof addr.sun_path) {
    return fail(fmt::format("socket path {} is empty or longer than {} bytes", s,
                            sizeof addr.sun_path - 1));
  }
  std::memcpy(addr.sun_path, s.c_str(), s.size() + 1);
  return addr;
}

// True when something accepts connections on `path` (a running daemon).
bool someone_listens(const sockaddr_un& addr) {
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  const bool ok = connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) == 0;
  close(fd);
  return ok;
}

Result<PeerCred> peer_credentials(int fd) {
  ucred cred{};
  socklen_t len = sizeof cred;
  if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) {
    const int err = errno;
    return fail(fmt::format("SO_PEERCRED: {}", errno_text(err)), err);
  }
  PeerCred peer{.pid = cred.pid, .uid = cred.uid, .gid = cred.gid};
  std::vector<gid_t> groups(64);
  for (int attempt = 0; attempt < 4; ++attempt) {
    len = static_cast<socklen_t>(groups.size() * sizeof(gid_t));
    if (getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, groups.data(), &len) == 0) {
      groups.resize(len / sizeof(gid_t));
      peer.groups = std::move(groups);
      return peer;
    }
    if (errno != ERANGE) {
      const int err = errno;
      return fail(fmt::format("SO_PEERGROUPS: {}", errno_text(err)), err);
    }
    groups.resize(len / sizeof(gid_t) + 1);
  }
  return fail("SO_PEERGROUPS: group list kept growing");
}

}  // namespace

Result<void> check_peer(const PeerCred& peer, uid_t daemon_uid, gid_t socket_gid,
                        const std::string& group_name) {
  if (peer.uid == 0 || peer.uid == daemon_uid) return {};
  if (peer.gid == socket_gid ||
      std::find(peer.groups.begin(), peer.groups.end(), socket_gid) != peer.groups.end()) {
    return {};
  }
  return fail(fmt::format(
      "permission denied: uid {} (pid {}) is not root, kvtierd's user or a member of group {}",
      peer.uid, peer.pid, group_name));
}

namespace {

std::string missing_group_error(const std::string& group, const Error& lookup) {
  if (lookup.code != ENOENT) {
    return fmt::format("[telemetry] socket_group = \"{}\": {}", group, lookup.message);
  }
  return fmt::format(
      "[telemetry] socket_group = \"{}\": no such group; create it (groupadd --system {}; the "
      "kvtier package creates it through sysusers.d) or set socket_group to an existing group, "
      "e.g. \"root\"",
      group, group);
}

}  // namespace

Result<void> check_socket_options(const ControlSocketOptions& opts) {
  std::vector<std::string> errors;
  if ((opts.mode & ~0777U) != 0) {
    errors.push_back(fmt::format("socket mode {:o} has bits outside 0777", opts.mode));
  }
  if (auto addr = unix_address(opts.path); !addr) errors.push_back(addr.error().message);
  if (!opts.owner.empty()) {
    if (auto uid = lookup_user(opts.owner); !uid) {
      errors.push_back("control socket owner: " + uid.error().message);
    }
  }
  if (!opts.group.empty()) {
    if (auto gid = lookup_group(opts.group); !gid)
      errors.push_back(missing_group_error(opts.group, gid.error()));
  }
  struct stat st {};
  if (lstat(opts.path.c_str(), &st) == 0 && !S_ISSOCK(st.st_mode)) {
    errors.push_back(
        fmt::format("{} exists and is not a socket; remove it or choose another socket path",
                    opts.path.string()));
  }
  if (errors.empty()) return {};
  std::string msg;
  for (const auto& e : errors) msg += (msg.empty() ? "" : "\n") + e;
  return fail(msg);
}

Result<uid_t> lookup_user(const std::string& name) {
  std::array<char, 4096> buf{};
  passwd pw{};
  passwd* found = nullptr;
  const int rc = getpwnam_r(name.c_str(), &pw, buf.data(), buf.size(), &found);
  if (rc != 0) return fail(fmt::format("looking up user {}: {}", name, errno_text(rc)), rc);
  if (found == nullptr) return fail(fmt::format("no such user: {}", name), ENOENT);
  return pw.pw_uid;
}

Result<gid_t> lookup_group(const std::string& name) {
  std::array<char, 16384> buf{};
  group gr{};
  group* found = nullptr;
  const int rc = getgrnam_r(name.c_str(), &gr, buf.data(), buf.size(), &found);
  if (rc != 0) return fail(fmt::format("looking up group {}: {}", name, errno_text(rc)), rc);
  if (found == nullptr) return fail(fmt::format("no such group: {}", name), ENOENT);
  return gr.gr_gid;
}

std::string group_name(gid_t gid) {
  std::array<char, 16384> buf{};
  group gr{};
  group* found = nullptr;
  if (getgrgid_r(gid, &gr, buf.data(), buf.size(), &found) == 0 && found != nullptr) {
    return gr.gr_name;
  }
  return fmt::format("{}", gid);
}

namespace {

// The socket's directory exists and nothing is at its path: a stale socket
// (left by a daemon that was killed) goes, anything else is an error.
Result<void> prepare_path(const std::filesystem::path& path, const sockaddr_un& addr) {
  std::error_code ec;
  const auto dir = path.parent_path();
  if (!dir.empty() && !std::filesystem::exists(dir, ec)) {
    std::filesystem::create_directories(dir, ec);
    if (ec) {
      return fail(
          fmt::format("cannot create {} for the control socket: {}", dir.string(), ec.message()),
          ec.value());
    }
  }
  struct stat st {};
  if (lstat(path.c_str(), &st) == 0) {
    if (!S_ISSOCK(st.st_mode)) {
      return fail(fmt::format(
          "{} exists and is not a socket; remove it or choose another socket path", path.string()));
    }
    if (someone_listens(addr)) {
      return fail(fmt::format("{} is in use: another kvtierd is running", path.string()),
                  EADDRINUSE);
    }
    unlink(path.c_str());
  }
  return {};
}

}  // namespace

Result<std::unique_ptr<ControlServer>> ControlServer::open(EventLoop& loop,
                                                           ControlSocketOptions opts) {
  if ((opts.mode & ~0777U) != 0) {
    return fail(fmt::format("socket mode {:o} has bits outside 0777", opts.mode));
  }
  std::unique_ptr<ControlServer> srv(new ControlServer(loop, std::move(opts)));
  const auto& path = srv->opts_.path;
  auto addr = unix_address(path);
  if (!addr) return std::unexpected(addr.error());

  uid_t owner = static_cast<uid_t>(-1);
  srv->daemon_uid_ = geteuid();
  srv->socket_gid_ = getegid();
  if (!srv->opts_.owner.empty()) {
    auto uid = lookup_user(srv->opts_.owner);
    if (!uid) return fail("control socket owner: " + uid.error().message, uid.error().code);
    owner = *uid;
  }
  if (!srv->opts_.group.empty()) {
    auto gid = lookup_group(srv->opts_.group);
    if (!gid) return fail("control socket group: " + gid.error().message, gid.error().code);
    srv->socket_gid_ = *gid;
  }
  srv->socket_group_name_ = group_name(srv->socket_gid_);

  if (auto ok = prepare_path(path, *addr); !ok) return std::unexpected(ok.error());
  struct stat st {};

  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    const int err = errno;
    return fail(fmt::format("socket(AF_UNIX): {}", errno_text(err)), err);
  }
  srv->listen_fd_ = fd;
  // Linux creates the socket file with the socket inode's mode (minus umask):
  // owner-only from the start, widened only after owner and group are set.
  fchmod(fd, 0600);
  if (bind(fd, reinterpret_cast<const sockaddr*>(&*addr), sizeof *addr) != 0) {
    const int err = errno;
    return fail(fmt::format("cannot bind control socket {}: {}", path.string(), errno_text(err)),
                err);
  }
  if (stat(path.c_str(), &st) == 0) {
    srv->dev_ = st.st_dev;
    srv->ino_ = st.st_ino;
  }
  if (chown(path.c_str(), owner, srv->socket_gid_) != 0) {
    const int err = errno;
    return fail(fmt::format("cannot chown control socket {} to group {}: {}", path.string(),
                            srv->socket_group_name_, errno_text(err)),
                err);
  }
  if (chmod(path.c_str(), srv->opts_.mode) != 0) {
    const int err = errno;
    return fail(fmt::format("cannot chmod control socket {} to {:o}: {}", path.string(),
                            srv->opts_.mode, errno_text(err)),
                err);
  }
  if (listen(fd, kListenBacklog) != 0) {
    const int err = errno;
    return fail(fmt::format("listen on {}: {}", path.string(), errno_text(err)), err);
  }
  ControlServer* self = srv.get();
  if (auto added = loop.add_fd(fd, EPOLLIN, [self](std::uint32_t) { self->on_accept(); }); !added) {
    return std::unexpected(added.error());
  }
  // Deadlines are checked a few times per shortest timeout, at most every second.
  const auto period = std::clamp(std::min(srv->opts_.idle_timeout, srv->opts_.request_timeout) / 4,
                                 std::chrono::milliseconds(20), std::chrono::milliseconds(1000));
  auto timer = loop.add_timer(period, period, [self] { self->sweep(monotonic_now()); });
  if (!timer) return std::unexpected(timer.error());
  srv->sweep_timer_ = *timer;
  srv->register_command("help", [self](const json&, const PeerCred&) -> Result<json> {
    json names = json::array();
    for (const auto& [name, _] : self->commands_) names.push_back(name);
    return json{{"commands", names}};
  });
  spdlog::info("control socket {} (mode {:04o}, group {})", path.string(), srv->opts_.mode,
               srv->socket_group_name_);
  return srv;
}

ControlServer::~ControlServer() {
  if (sweep_timer_) loop_.remove_timer(*sweep_timer_);
  while (!clients_.empty()) close_client(clients_.begin()->first);
  if (listen_fd_ >= 0) {
    loop_.remove_fd(listen_fd_);
    close(listen_fd_);
    // Only remove the file if it is still the one we bound: a second daemon
    // started by mistake must not delete the running one's socket.
    struct stat st {};
    if (ino_ != 0 && lstat(opts_.path.c_str(), &st) == 0 && st.st_dev == dev_ &&
        st.st_ino == ino_) {
      unlink(opts_.path.c_str());
    }
  }
}

void ControlServer::register_command(const std::string& name, Handler handler) {
  commands_[name] = std::move(handler);
}

std::string ControlServer::no_slot_for(const PeerCred& peer) const {
  if (clients_.size() >= opts_.max_clients) {
    return fmt::format("too many clients (limit {})", opts_.max_clients);
  }
  if (peer.uid == 0 || peer.uid == daemon_uid_) return "";
  const std::size_t shared =
      opts_.max_clients - std::min(opts_.reserved_for_root, opts_.max_clients);
  if (clients_.size() >= shared) {
    return fmt::format("too many clients (limit {}; the last {} are kept for root)",
                       opts_.max_clients, opts_.max_clients - shared);
  }
  const auto mine = static_cast<std::size_t>(std::ranges::count_if(
      clients_, [&](const auto& kv) { return kv.second->peer.uid == peer.uid; }));
  if (mine >= opts_.max_clients_per_uid) {
    return fmt::format("too many connections from uid {} (limit {} per user)", peer.uid,
                       opts_.max_clients_per_uid);
  }
  return "";
}

bool ControlServer::evict_idle_for(const PeerCred& peer, TimeNs now) {
  if (peer.uid != 0 && peer.uid != daemon_uid_) return false;
  const Client* oldest = nullptr;
  for (const auto& [fd, c] : clients_) {
    const bool idle = c->request_started == 0 && c->reply_queued == 0 && !c->closing &&
                      c->in.pending() == 0 && now - c->last_active >= ns(opts_.evict_idle_after);
    if (idle && (oldest == nullptr || c->last_active < oldest->last_active)) oldest = c.get();
  }
  if (oldest == nullptr) return false;
  ++evicted_;
  log_.log(spdlog::level::warn, "control socket: idle clients closed for root",
           fmt::format("control socket: closed idle uid {} pid {} to make room for uid {} pid {}",
                       oldest->peer.uid, oldest->peer.pid, peer.uid, peer.pid),
           now);
  const std::string line = encode_error("idle connection closed to make room for root");
  [[maybe_unused]] auto n = send(oldest->fd, line.data(), line.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
  close_client(oldest->fd);
  return true;
}

void ControlServer::refuse(int fd, const PeerCred& peer, std::string_view kind,
                           const std::string& why) {
  log_.log(spdlog::level::warn, fmt::format("control socket: {}", kind),
           fmt::format("control socket: rejected uid {} pid {}: {}", peer.uid, peer.pid, why),
           monotonic_now());
  // Best effort: the socket buffer is empty, so this short line fits.
  const std::string line = encode_error(why);
  [[maybe_unused]] auto n = send(fd, line.data(), line.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
  close(fd);
}

void ControlServer::on_accept() {
  for (int accepted = 0; accepted < kMaxAcceptsPerEvent; ++accepted) {
    const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      const int err = errno;
      if (err == EAGAIN || err == EINTR || err == ECONNABORTED) return;
      // EMFILE and friends: the pending connection stays queued; try again at
      // the next event rather than spin.
      log_.log(spdlog::level::warn, "control socket: accept errors",
               fmt::format("control socket: accept: {}", errno_text(err)), monotonic_now());
      return;
    }
    auto peer = peer_credentials(fd);
    if (!peer) {
      log_.log(spdlog::level::warn, "control socket: unreadable peers",
               fmt::format("control socket: dropping a client: {}", peer.error().message),
               monotonic_now());
      close(fd);
      continue;
    }
    if (auto allowed = check_peer(*peer, daemon_uid_, socket_gid_, socket_group_name_); !allowed) {
      ++rejected_;
      refuse(fd, *peer, "rejected peers", allowed.error().message);
      continue;
    }
    if (std::string why = no_slot_for(*peer);
        !why.empty() && !(evict_idle_for(*peer, monotonic_now()) && no_slot_for(*peer).empty())) {
      ++refused_full_;
      refuse(fd, *peer, "refused connections (no free slot)", why);
      continue;
    }
    spdlog::debug("control socket: client uid {} pid {}", peer->uid, peer->pid);
    auto client = std::make_unique<Client>(Client{.fd = fd,
                                                  .peer = std::move(*peer),
                                                  .in = LineReader(opts_.max_request_bytes),
                                                  .last_active = monotonic_now()});
    if (auto added = loop_.add_fd(fd, EPOLLIN | EPOLLRDHUP,
                                  [this, fd](std::uint32_t ev) { on_client(fd, ev); });
        !added) {
      spdlog::warn("control socket: {}", added.error().message);
      close(fd);
      continue;
    }
    clients_[fd] = std::move(client);
  }
}

void ControlServer::drop(int fd, const std::string& why) {
  auto it = clients_.find(fd);
  if (it == clients_.end()) return;
  const Client& c = *it->second;
  ++dropped_;
  log_.log(spdlog::level::warn, "control socket: dropped clients",
           fmt::format("control socket: dropped uid {} pid {}: {}", c.peer.uid, c.peer.pid, why),
           monotonic_now());
  const std::string line = encode_error(why);
  [[maybe_unused]] auto n = send(fd, line.data(), line.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
  close_client(fd);
}

void ControlServer::sweep(TimeNs now) {
  std::vector<std::pair<int, std::string>> late;
  for (const auto& [fd, c] : clients_) {
    const TimeNs request_timeout = ns(opts_.request_timeout);
    if (c->request_started != 0 && now - c->request_started > request_timeout) {
      late.emplace_back(
          fd, fmt::format("request not finished within {} ms", opts_.request_timeout.count()));
    } else if (c->reply_queued != 0 && now - c->reply_queued > request_timeout) {
      late.emplace_back(fd,
                        fmt::format("reply not read within {} ms", opts_.request_timeout.count()));
    } else if (c->request_started == 0 && c->reply_queued == 0 &&
               now - c->last_active > ns(opts_.idle_timeout)) {
      late.emplace_back(fd, fmt::format("idle for {} ms", opts_.idle_timeout.count()));
    }
  }
  for (const auto& [fd, why] : late) drop(fd, why);
  log_.flush(now);
}

void ControlServer::on_client(int fd, std::uint32_t events) {
  auto it = clients_.find(fd);
  if (it == clients_.end()) return;
  Client& c = *it->second;
  if ((events & EPOLLERR) != 0) {
    close_client(fd);
    return;
  }
  if ((events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP)) != 0 && !c.closing) {
    std::array<char, 16384> buf{};
    std::size_t total = 0;
    while (total < kMaxReadPerEvent) {
      const ssize_t n = recv(fd, buf.data(), buf.size(), 0);
      if (n < 0) {
        const int err = errno;
        if (err == EAGAIN || err == EINTR) break;
        close_client(fd);
        return;
      }
      if (n == 0) {  // the client finished sending; answer what it asked, then close
        c.closing = true;
        break;
      }
      total += static_cast<std::size_t>(n);
      c.last_active = monotonic_now();
      if (c.request_started == 0) c.request_started = c.last_active;
      if (!c.in.append(std::string_view(buf.data(), static_cast<std::size_t>(n)))) {
        log_.log(spdlog::level::warn, "control socket: over-long requests",
                 fmt::format("control socket: uid {} pid {} sent a request longer than {} bytes; "
                             "dropped",
                             c.peer.uid, c.peer.pid, opts_.max_request_bytes),
                 c.last_active);
        c.out += encode_error(fmt::format("request longer than {} bytes", opts_.max_request_bytes));
        c.closing = true;
        break;
      }
    }
  }
  if (!serve(c)) return;
  if ((events & EPOLLHUP) != 0 && c.out.empty()) close_client(fd);
}

bool ControlServer::serve(Client& c) {
  while (true) {
    // Answer queued requests only while the client keeps up with the replies:
    // a client pipelining expensive requests (dump) and never reading costs
    // one reply's work, not all of them.
    while (c.out.size() < kReplyHighWater) {
      auto line = c.in.next_line();
      if (!line) break;
      if (line->empty()) continue;
      handle_line(c, *line);
      // Sent at once: for a peer that has gone (EPIPE), nothing more is computed.
      if (!flush(c)) return false;
    }
    // The request clock runs only while part of a line is in; the reply clock
    // while a reply waits to be read.
    if (c.in.pending() == 0 || c.in.has_line()) c.request_started = 0;
    if (c.in.pending() > 0 && !c.in.has_line() && c.request_started == 0) {
      c.request_started = monotonic_now();
    }
    if (!c.out.empty() && c.reply_queued == 0) c.reply_queued = monotonic_now();
    if (!flush(c)) return false;
    if (!c.out.empty() || !c.in.has_line()) return true;
  }
}

void ControlServer::handle_line(Client& c, const std::string& line) {
  auto req = parse_request(line);
  if (!req) {
    c.out += encode_error(req.error().message);
    return;
  }
  auto cmd = commands_.find(req->command);
  if (cmd == commands_.end()) {
    c.out +=
        encode_error(fmt::format("unknown command \"{}\" (\"help\" lists them)", req->command));
    return;
  }
  // A handler bug or a bad argument type must cost one error reply, not the daemon.
  try {
    auto result = cmd->second(req->args, c.peer);
    c.out += result ? encode_ok(*result) : encode_error(result.error().message);
  } catch (const std::exception& e) {
    log_.log(spdlog::level::warn, "control socket: failed commands",
             fmt::format("control command {} failed: {}", req->command, e.what()), monotonic_now());
    c.out += encode_error(fmt::format("command {} failed: {}", req->command, e.what()));
  }
}

bool ControlServer::flush(Client& c) {
  const int fd = c.fd;
  std::size_t sent = 0;
  while (sent < c.out.size()) {
    const ssize_t n = send(fd, c.out.data() + sent, c.out.size() - sent, MSG_NOSIGNAL);
    if (n < 0) {
      const int err = errno;
      if (err == EAGAIN || err == EINTR) break;
      close_client(fd);  // EPIPE, ECONNRESET: the client went away
      return false;
    }
    sent += static_cast<std::size_t>(n);
  }
  c.out.erase(0, sent);
  if (sent > 0) {
    c.last_active = monotonic_now();
    // Progress restarts the reply clock: a large dump read steadily is fine.
    c.reply_queued = c.out.empty() ? 0 : c.last_active;
  }
  if (c.out.size() > opts_.max_pending_output) {
    drop(fd, fmt::format("not reading its replies ({} bytes queued)", c.out.size()));
    return false;
  }
  if (c.out.empty() && c.closing && !c.in.has_line()) {
    close_client(fd);
    return false;
  }
  const bool want_write = !c.out.empty();
  if (want_write != c.want_write) {
    c.want_write = want_write;
    // While replies are queued, stop reading: a client pipelining requests
    // without reading answers gets back-pressure instead of memory.
    [[maybe_unused]] auto r = loop_.modify_fd(fd, want_write ? EPOLLOUT : (EPOLLIN | EPOLLRDHUP));
  }
  return true;
}

void ControlServer::close_client(int fd) {
  loop_.remove_fd(fd);
  close(fd);
  clients_.erase(fd);
}

}  // namespace kvtier::agent
