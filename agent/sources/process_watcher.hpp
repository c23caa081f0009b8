#pragma once
// Process lifecycle from bpf/procs.bpf.c: exec, new processes and process
// exit as they happen, so the daemon adds an inference server the moment it
// starts and forgets it (and its map entries) when it ends.

#include <memory>
#include <string>
#include <vector>

#include "agent/host_paths.hpp"
#include "agent/hotness_source.hpp"
#include "agent/sources/bpf_events.hpp"

namespace kvtier::agent {

// Which processes are targets: an exact comm (the kernel's 15-character
// name) or a substring of the command line. Empty selects nothing.
struct ProcessSelector {
  std::vector<std::string> comms;
  std::vector<std::string> cmdline_contains;

  [[nodiscard]] bool matches(std::string_view comm, std::string_view cmdline) const;
};

// /proc/PID/cmdline with the NULs turned into spaces.
Result<std::string> read_cmdline(const HostPaths& paths, Pid pid);
// Running processes the selector picks (the startup scan; events take over).
std::vector<Pid> scan_processes(const HostPaths& paths, const ProcessSelector& sel);

class ProcessWatcher {
 public:
  explicit ProcessWatcher(HostPaths paths);
  ~ProcessWatcher();
  ProcessWatcher(const ProcessWatcher&) = delete;
  ProcessWatcher& operator=(const ProcessWatcher&) = delete;

  [[nodiscard]] Availability probe() const;
  Result<void> start();
  void stop();
  // Readable when events are waiting, for the daemon's epoll loop.
  [[nodiscard]] int epoll_fd() const;
  // Appends waiting events, blocking up to timeout_ms (0: do not wait).
  Result<std::size_t> poll(int timeout_ms, std::vector<ProcEvent>& out);
  // Events lost because the ring buffer was full.
  [[nodiscard]] Result<std::uint64_t> dropped() const;
  [[nodiscard]] std::vector<int> program_fds() const;

  struct Bpf;  // opaque

 private:
  HostPaths paths_;
  std::unique_ptr<Bpf> bpf_;
};

}  // namespace kvtier::agent
