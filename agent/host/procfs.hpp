#pragma once
// Readers for the parts of /proc/PID that target discovery and range tracking
// use. Each takes HostPaths so tests run them over fixture trees.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "agent/host/host_paths.hpp"
#include "policy/config.hpp"
#include "policy/error.hpp"
#include "policy/types.hpp"

namespace kvtier::agent {

// What selectors match on (comm, cmdline, exe, cgroup): the policy's own type.
using ProcessInfo = policy::ProcessInfo;

// The numeric entries of /proc. Never fails on a process that vanishes mid-scan.
std::vector<Pid> list_pids(const HostPaths& paths);

// ESRCH-like failures (the process exited) come back as an Error with code ESRCH.
// Only the first policy::kMaxCmdlineBytes of the command line are read.
Result<ProcessInfo> read_process(const HostPaths& paths, Pid pid);

// The raw NUL-separated /proc/PID/cmdline -> arguments joined by single spaces.
std::string parse_cmdline(std::string_view raw);
// The cgroup v2 path from the text of /proc/PID/cgroup (its "0::" line), if any.
std::optional<std::string> parse_cgroup(std::string_view text);

// The cgroup v2 path of a process ("/system.slice/x.service", "/" for the
// root), from the "0::" line of /proc/PID/cgroup. ESRCH when the process is
// gone; an error naming the file when it has no cgroup2 line.
Result<std::string> read_cgroup(const HostPaths& paths, Pid pid);

// The number of threads from the text of /proc/PID/status (its "Threads:" line).
std::optional<std::uint32_t> parse_status_threads(std::string_view text);
// How many threads the process has now: ESRCH when it is gone, an error naming
// the file when its status has no Threads line.
Result<std::uint32_t> read_thread_count(const HostPaths& paths, Pid pid);

// The process's CPU time, all its threads, user and system, in clock ticks:
// utime + stime from the text of /proc/PID/stat.
std::optional<std::uint64_t> parse_stat_cpu_ticks(std::string_view text);
// The same for a live process, in nanoseconds (at the clock tick's 10 ms
// resolution): ESRCH when it is gone, an error naming the file otherwise.
Result<TimeNs> read_cpu_time(const HostPaths& paths, Pid pid);

struct MapEntry {
  AddrRange range;
  std::string perms;  // "rw-p"
  std::uint64_t offset = 0;
  std::uint32_t dev_major = 0;  // the device of the file ("fe:01"); 0:N for tmpfs, memfd, SysV
  std::uint32_t dev_minor = 0;
  std::uint64_t inode = 0;
  std::string path;  // "", "[heap]", "[stack]", "/usr/lib/..."
};

Result<std::vector<MapEntry>> read_maps(const HostPaths& paths, Pid pid);
// The text of a maps file; `what` names it in errors ("FILE:LINE: ...").
Result<std::vector<MapEntry>> parse_maps(std::string_view text, std::string_view what);

// Memory kvtier may move: private, writable, anonymous mappings (heap and
// anonymous mmap, where inference servers keep their KV cache). Stacks, vdso
// and file mappings are left alone.
bool is_movable_anon(const MapEntry& e);

// A KV pool in shared memory that several processes may map (docs/sources.md,
// "Shared pools"): a writable MAP_SHARED mapping of a memfd ("/memfd:NAME
// (deleted)"), a /dev/shm file or a SysV segment ("/SYSV..."), all shmem
// pages that move_pages(2) moves. Device and inode name the pool.
bool is_shared_pool(const MapEntry& e);

}  // namespace kvtier::agent
