#pragma once
// Process lifecycle from bpf/procs.bpf.c: exec, new processes and process
// exit as they happen. kvtierd runs it (Controller::on_process_events): an
// inference server becomes a target the moment it execs and is forgotten
// when it ends; /proc is still read in full every 30 s. `kvtierctl sources`
// probes it; tests/privileged/sources_test.cpp runs it.

#include <memory>
#include <vector>

#include "agent/host/availability.hpp"
#include "agent/host/host_paths.hpp"
#include "agent/sources/bpf_events.hpp"
#include "policy/error.hpp"

namespace kvtier::agent {

// Matching events against the config's selectors is the daemon's job: it
// reads the new process with read_process() (agent/procfs.hpp).
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
