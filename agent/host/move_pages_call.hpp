#pragma once
// The move_pages(2) system call behind a function value, so unit tests script
// per-page statuses and failures while the movers run unchanged. The same call
// with `nodes == nullptr` only reports where each page is.

#include <functional>
#include <span>

#include "policy/types.hpp"

namespace kvtier::agent {

struct MovePagesResult {
  long ret = 0;  // the call's return value: 0, a count of pages not moved, or -1
  int err = 0;   // errno when ret == -1
};

// (pid, page addresses, target node per page or nullptr to query, status out, flags)
using MovePagesFn =
    std::function<MovePagesResult(Pid, std::span<void*>, const int*, std::span<int>, int)>;

// The kernel's move_pages(2), through libnuma.
MovePagesFn system_move_pages();

// What one page's status word says, in the movers' terms.
enum class PageStatus : std::uint8_t {
  kOnNode,      // status >= 0: the node the page is on
  kBusy,        // -EBUSY / -EAGAIN: in use, try later
  kNotPresent,  // -ENOENT / -EFAULT: not mapped, zero page, or not migratable memory
  kNoMemory,    // -ENOMEM: the target node has no room
  kPermission,  // -EACCES / -EPERM: shared with another process, or not allowed
  kOther,       // any other negative value
};

PageStatus classify_status(int status);

}  // namespace kvtier::agent
