#include "agent/host/procfs.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdint>
#include <filesystem>
#include <istream>
#include <limits>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include "agent/host/host_paths.hpp"
#include "agent/host/sysfs.hpp"
#include "policy/config.hpp"
#include "policy/error.hpp"
#include "policy/types.hpp"

namespace kvtier::agent {
namespace fs = std::filesystem;

namespace {

// A read under /proc/PID that fails with ENOENT means the process is gone.
Error gone_or(const Error& e, Pid pid) {
  if (e.code == ENOENT || e.code == ESRCH) {
    return Error{.message = fmt::format("process {} exited", pid), .code = ESRCH};
  }
  return e;
}

bool parse_hex(std::string_view s, std::uint64_t& out) {
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), out, 16);
  return ec == std::errc{} && ptr == s.data() + s.size();
}

// "fe:01": the major and minor numbers of a device, in hex.
bool parse_dev(std::string_view s, std::uint32_t& major, std::uint32_t& minor) {
  const auto colon = s.find(':');
  if (colon == std::string_view::npos) return false;
  std::uint64_t ma = 0;
  std::uint64_t mi = 0;
  if (!parse_hex(s.substr(0, colon), ma) || !parse_hex(s.substr(colon + 1), mi) ||
      ma > std::numeric_limits<std::uint32_t>::max() ||
      mi > std::numeric_limits<std::uint32_t>::max()) {
    return false;
  }
  major = static_cast<std::uint32_t>(ma);
  minor = static_cast<std::uint32_t>(mi);
  return true;
}

// The value of the first "KEY: VALUE" line of a /proc file (/proc/PID/status,
// /proc/PID/sched: blanks around the colon), trimmed; nullopt without one.
std::optional<std::string_view> field_value(std::string_view text, std::string_view key) {
  constexpr std::string_view kBlank = " \t\r";
  while (!text.empty()) {
    std::string_view line = take_line(text);
    if (!line.starts_with(key)) continue;
    line.remove_prefix(key.size());
    line.remove_prefix(std::min(line.find_first_not_of(kBlank), line.size()));
    if (!line.starts_with(':')) continue;
    line.remove_prefix(1);
    line.remove_prefix(std::min(line.find_first_not_of(kBlank), line.size()));
    line.remove_suffix(line.size() - std::min(line.find_last_not_of(kBlank) + 1, line.size()));
    return line;
  }
  return std::nullopt;
}

}  // namespace

std::vector<Pid> list_pids(const HostPaths& paths) {
  std::vector<Pid> pids;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(paths.proc, ec)) {
    const std::string name = entry.path().filename().string();
    Pid pid = 0;
    auto [ptr, perr] = std::from_chars(name.data(), name.data() + name.size(), pid);
    if (perr == std::errc{} && ptr == name.data() + name.size() && pid > 0) pids.push_back(pid);
  }
  return pids;
}

Result<ProcessInfo> read_process(const HostPaths& paths, Pid pid) {
  const fs::path dir = paths.proc / std::to_string(pid);
  ProcessInfo info{.pid = pid};
  auto comm = read_text(dir / "comm");
  if (!comm) return std::unexpected(gone_or(comm.error(), pid));
  info.comm = std::move(*comm);

  auto cmdline = read_text_prefix(dir / "cmdline", policy::kMaxCmdlineBytes);
  if (!cmdline) return std::unexpected(gone_or(cmdline.error(), pid));
  info.cmdline = parse_cmdline(*cmdline);

  std::error_code ec;
  const fs::path exe = fs::read_symlink(dir / "exe", ec);
  if (!ec) info.exe = exe.string();

  // A process without a cgroup2 line (cgroup v1 host) is matched without one.
  if (auto cg = read_cgroup(paths, pid)) info.cgroup = std::move(*cg);
  return info;
}

std::string parse_cmdline(std::string_view raw) {
  std::string args(raw);
  while (!args.empty() && args.back() == '\0') args.pop_back();
  for (char& c : args) {
    if (c == '\0') c = ' ';
  }
  return args;
}

std::optional<std::string> parse_cgroup(std::string_view text) {
  while (!text.empty()) {
    const std::string_view line = take_line(text);
    if (line.starts_with("0::")) return std::string(line.substr(3));
  }
  return std::nullopt;
}

Result<std::string> read_cgroup(const HostPaths& paths, Pid pid) {
  const fs::path file = paths.proc / std::to_string(pid) / "cgroup";
  auto text = read_text(file);
  if (!text) return std::unexpected(gone_or(text.error(), pid));
  if (auto cg = parse_cgroup(*text)) return std::move(*cg);
  return fail(fmt::format("{}: no cgroup2 line ('0::/path'); mount cgroup2 to use memcg filters",
                          file.string()));
}

std::optional<std::uint32_t> parse_status_threads(std::string_view text) {
  auto value = field_value(text, "Threads");
  if (!value) return std::nullopt;
  auto n = parse_u64(*value, "Threads");
  if (!n || *n == 0 || *n > std::numeric_limits<std::uint32_t>::max()) return std::nullopt;
  return static_cast<std::uint32_t>(*n);
}

Result<std::uint32_t> read_thread_count(const HostPaths& paths, Pid pid) {
  const fs::path file = paths.proc / std::to_string(pid) / "status";
  auto text = read_text(file);
  if (!text) return std::unexpected(gone_or(text.error(), pid));
  if (auto n = parse_status_threads(*text)) return *n;
  return fail(fmt::format("{}: no 'Threads:' line", file.string()));
}

std::optional<std::uint64_t> parse_stat_cpu_ticks(std::string_view text) {
  const auto paren = text.rfind(')');
  if (paren == std::string_view::npos) return std::nullopt;
  std::string_view rest = text.substr(paren + 1);
  // After "comm)": state (field 3) ... utime (14) stime (15).
  constexpr int kUtime = 14 - 3;
  std::uint64_t ticks = 0;
  for (int field = 0; field <= kUtime + 1; ++field) {
    rest.remove_prefix(std::min(rest.find_first_not_of(' '), rest.size()));
    const std::string_view value = rest.substr(0, rest.find(' '));
    if (value.empty()) return std::nullopt;
    if (field >= kUtime) {
      auto n = parse_u64(value, "stat");
      if (!n) return std::nullopt;
      ticks += *n;
    }
    rest.remove_prefix(value.size());
  }
  return ticks;
}

Result<TimeNs> read_cpu_time(const HostPaths& paths, Pid pid) {
  const fs::path file = paths.proc / std::to_string(pid) / "stat";
  auto text = read_text(file);
  if (!text) return std::unexpected(gone_or(text.error(), pid));
  auto ticks = parse_stat_cpu_ticks(*text);
  if (!ticks) return fail(fmt::format("{}: no utime and stime fields", file.string()));
  static const long kTicksPerSec = sysconf(_SC_CLK_TCK);
  return static_cast<TimeNs>(
      *ticks * (1'000'000'000 / static_cast<std::uint64_t>(kTicksPerSec > 0 ? kTicksPerSec : 100)));
}

Result<std::vector<MapEntry>> read_maps(const HostPaths& paths, Pid pid) {
  const fs::path file = paths.proc / std::to_string(pid) / "maps";
  auto text = read_text(file);
  if (!text) return std::unexpected(gone_or(text.error(), pid));
  return parse_maps(*text, file.string());
}

Result<std::vector<MapEntry>> parse_maps(std::string_view text, std::string_view what) {
  std::vector<MapEntry> out;
  std::istringstream lines{std::string(text)};
  std::string line;
  int lineno = 0;
  while (std::getline(lines, line)) {
    ++lineno;
    if (line.empty()) continue;
    // start-end perms offset dev inode [path]
    std::istringstream in(line);
    std::string range;
    std::string offset;
    std::string dev;
    MapEntry e;
    if (!(in >> range >> e.perms >> offset >> dev >> e.inode)) {
      return fail(fmt::format("{}:{}: malformed maps line '{}'", what, lineno, line));
    }
    const auto dash = range.find('-');
    if (dash == std::string::npos || !parse_hex(range.substr(0, dash), e.range.start) ||
        !parse_hex(range.substr(dash + 1), e.range.end) || !parse_hex(offset, e.offset) ||
        e.range.end < e.range.start || e.perms.size() != 4 ||
        !parse_dev(dev, e.dev_major, e.dev_minor)) {
      return fail(fmt::format("{}:{}: malformed maps line '{}'", what, lineno, line));
    }
    std::getline(in >> std::ws, e.path);
    out.push_back(std::move(e));
  }
  return out;
}

bool is_movable_anon(const MapEntry& e) {
  const bool private_rw = e.perms[0] == 'r' && e.perms[1] == 'w' && e.perms[3] == 'p';
  const bool anonymous = e.inode == 0 && (e.path.empty() || e.path == "[heap]");
  return private_rw && anonymous;
}

bool is_shared_pool(const MapEntry& e) {
  const bool shared_rw = e.perms[0] == 'r' && e.perms[1] == 'w' && e.perms[3] == 's';
  const bool shmem = e.path.starts_with("/memfd:") || e.path.starts_with("/dev/shm/") ||
                     e.path.starts_with("/SYSV");
  return shared_rw && shmem && e.inode != 0;
}

}  // namespace kvtier::agent
