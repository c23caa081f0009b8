#include "agent/host/self_priority.hpp"

#include <fmt/format.h>
#include <sys/resource.h>
#include <sys/types.h>

#include <cerrno>
#include <filesystem>
#include <string>
#include <system_error>

#include "agent/host/sysfs.hpp"
#include "policy/error.hpp"

namespace kvtier::agent {

Result<void> set_own_nice(int nice) {
  std::error_code ec;
  std::filesystem::directory_iterator it("/proc/self/task", ec);
  if (ec) {
    return fail(fmt::format("[daemon] nice: cannot list /proc/self/task: {}", ec.message()),
                ec.value());
  }
  for (const auto& entry : it) {
    const std::string name = entry.path().filename().string();
    auto tid = parse_u64(name, "/proc/self/task");
    if (!tid) continue;
    // PRIO_PROCESS with a thread id sets that thread alone (Linux).
    if (setpriority(PRIO_PROCESS, static_cast<id_t>(*tid), nice) != 0) {
      const int err = errno;
      if (err == ESRCH) continue;  // the thread ended meanwhile
      return fail(fmt::format("[daemon] nice: setpriority(thread {}, {}): {}{}", *tid, nice,
                              errno_text(err),
                              err == EACCES || err == EPERM
                                  ? " (a lower value than kvtierd has needs CAP_SYS_NICE)"
                                  : ""),
                  err);
    }
  }
  return {};
}

int own_nice() {
  errno = 0;
  const int v = getpriority(PRIO_PROCESS, 0);
  return errno == 0 ? v : 0;
}

}  // namespace kvtier::agent
