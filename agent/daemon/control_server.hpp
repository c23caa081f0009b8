#pragma once
// kvtierd's control socket: a unix stream socket serving newline-delimited
// JSON commands (control_protocol.hpp) to kvtierctl. Non-blocking and driven
// by the daemon's EventLoop: a slow or stuck client costs buffer space, never
// loop time. Who may connect is decided twice: by the file's mode, owner and
// group, and by the peer's credentials (SO_PEERCRED / SO_PEERGROUPS) at accept.

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "agent/daemon/control_protocol.hpp"
#include "agent/daemon/event_loop.hpp"
#include "agent/daemon/log_limiter.hpp"
#include "policy/error.hpp"
#include "policy/types.hpp"

namespace kvtier::agent {

struct ControlSocketOptions {
  std::filesystem::path path = "/run/kvtier/kvtierd.sock";
  std::uint32_t mode = 0660;
  std::string owner;  // user name; empty: the daemon's own user
  std::string group;  // group name; empty: the daemon's own group
  std::size_t max_clients = 16;
  // Connections one user other than root (or kvtierd's own user) may hold at
  // once, and slots only those may take: no group member can lock the others,
  // or root, out.
  std::size_t max_clients_per_uid = 4;
  std::size_t reserved_for_root = 2;
  // A connection with nothing in flight is closed after idle_timeout; one that
  // takes longer than request_timeout to send a request line or to read its
  // reply is dropped (kvtierctl sends a line and reads the reply at once).
  std::chrono::milliseconds idle_timeout{10000};
  std::chrono::milliseconds request_timeout{5000};
  // Root and kvtierd's own user are never locked out by idle connections: with
  // every slot taken, the connection idle the longest (nothing in flight for at
  // least evict_idle_after, so a client that has just connected keeps its
  // slot) is closed to make room for them.
  std::chrono::milliseconds evict_idle_after{1000};
  std::size_t max_request_bytes = kMaxRequestBytes;
  // A client that stops reading is dropped once this much output is queued.
  std::size_t max_pending_output = 64ULL << 20;
};

// Credentials of a connected peer, as the kernel recorded them at connect().
struct PeerCred {
  pid_t pid = 0;
  uid_t uid = 0;
  gid_t gid = 0;
  std::vector<gid_t> groups;  // supplementary groups
};

// Who may talk to the daemon: root, the daemon's own user, and members
// (primary or supplementary) of the socket's group. The error names the peer
// and the rule it failed.
Result<void> check_peer(const PeerCred& peer, uid_t daemon_uid, gid_t socket_gid,
                        const std::string& group_name);

// What ControlServer::open would refuse about `opts` before it binds: owner
// and group that do not exist, mode bits outside 0777, a path too long for a
// socket address, a file in the way that is not a socket. For
// `kvtierd --check-config`; one problem a line.
Result<void> check_socket_options(const ControlSocketOptions& opts);

Result<uid_t> lookup_user(const std::string& name);
Result<gid_t> lookup_group(const std::string& name);
std::string group_name(gid_t gid);

class ControlServer {
 public:
  // A command: its arguments and the caller in, its result (or a one-line
  // error sent back to the client) out.
  using Handler =
      std::function<Result<nlohmann::json>(const nlohmann::json& args, const PeerCred&)>;

  // Creates the socket (replacing a stale one, refusing if another daemon
  // answers on it), sets owner, group and mode, and starts accepting on `loop`.
  static Result<std::unique_ptr<ControlServer>> open(EventLoop& loop, ControlSocketOptions opts);
  // Drops every client and removes the socket file if it is still ours.
  ~ControlServer();
  ControlServer(const ControlServer&) = delete;
  ControlServer& operator=(const ControlServer&) = delete;

  // Later registrations replace earlier ones of the same name. "help" is built
  // in and lists the commands.
  void register_command(const std::string& name, Handler handler);

  [[nodiscard]] const std::filesystem::path& path() const { return opts_.path; }
  [[nodiscard]] gid_t socket_gid() const { return socket_gid_; }
  [[nodiscard]] std::size_t client_count() const { return clients_.size(); }
  // Peers refused by the credential check.
  [[nodiscard]] std::uint64_t rejected_peers() const { return rejected_; }
  // Allowed peers turned away because the slots (all, or theirs) were taken.
  [[nodiscard]] std::uint64_t refused_full() const { return refused_full_; }
  // Clients dropped for a timeout, an over-long request or unread replies.
  [[nodiscard]] std::uint64_t dropped_clients() const { return dropped_; }
  // Idle clients closed to make room for root or kvtierd's own user.
  [[nodiscard]] std::uint64_t evicted_clients() const { return evicted_; }

  // Drops clients past their deadlines and ends due log windows; a timer calls
  // it, tests may too.
  void sweep(TimeNs now);

 private:
  struct Client {
    int fd = -1;
    PeerCred peer;
    LineReader in;
    std::string out;
    bool closing = false;  // close once `out` is flushed
    bool want_write = false;
    TimeNs last_active = 0;      // accept, or the last byte read or written
    TimeNs request_started = 0;  // first byte of the unfinished request; 0: none
    TimeNs reply_queued = 0;     // since when `out` holds bytes; 0: empty
  };

  ControlServer(EventLoop& loop, ControlSocketOptions opts)
      : loop_(loop), opts_(std::move(opts)), log_(LogLimiter::Options{}) {}
  // Why a peer that passed the credential check may not have a slot now, or "".
  [[nodiscard]] std::string no_slot_for(const PeerCred& peer) const;
  // For root or kvtierd's user with no slot free: closes the client idle the
  // longest (at least evict_idle_after); false when none is.
  bool evict_idle_for(const PeerCred& peer, TimeNs now);
  void refuse(int fd, const PeerCred& peer, std::string_view kind, const std::string& why);
  void drop(int fd, const std::string& why);
  void on_accept();
  void on_client(int fd, std::uint32_t events);
  void handle_line(Client& c, const std::string& line);
  // Answers queued requests and flushes; false when the client was closed.
  bool serve(Client& c);
  // Returns false when the client was closed.
  bool flush(Client& c);
  void close_client(int fd);

  EventLoop& loop_;
  ControlSocketOptions opts_;
  int listen_fd_ = -1;
  dev_t dev_ = 0;
  ino_t ino_ = 0;
  uid_t daemon_uid_ = 0;
  gid_t socket_gid_ = 0;
  std::string socket_group_name_;
  std::uint64_t rejected_ = 0;
  std::uint64_t refused_full_ = 0;
  std::uint64_t dropped_ = 0;
  std::uint64_t evicted_ = 0;
  std::optional<EventLoop::TimerId> sweep_timer_;
  LogLimiter log_;
  std::map<std::string, Handler> commands_;
  std::map<int, std::unique_ptr<Client>> clients_;
};

}  // namespace kvtier::agent
