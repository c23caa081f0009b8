#include "agent/host/move_pages_call.hpp"

#include <numaif.h>

#include <cerrno>
#include <span>

#include "policy/types.hpp"

namespace kvtier::agent {

MovePagesFn system_move_pages() {
  return [](Pid pid, std::span<void*> pages, const int* nodes, std::span<int> status,
            int flags) -> MovePagesResult {
    errno = 0;
    const long ret = ::move_pages(pid, pages.size(), pages.data(), nodes, status.data(), flags);
    return MovePagesResult{.ret = ret, .err = ret < 0 ? errno : 0};
  };
}

PageStatus classify_status(int status) {
  if (status >= 0) return PageStatus::kOnNode;
  switch (-status) {
    case EBUSY:
    case EAGAIN:
      return PageStatus::kBusy;
    case ENOENT:
    case EFAULT:
      return PageStatus::kNotPresent;
    case ENOMEM:
      return PageStatus::kNoMemory;
    case EACCES:
    case EPERM:
      return PageStatus::kPermission;
    default:
      return PageStatus::kOther;
  }
}

}  // namespace kvtier::agent
