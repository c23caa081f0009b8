#include "agent/movers/dry_run_mover.hpp"

#include <cerrno>
#include <span>
#include <utility>

#include "agent/host/host_paths.hpp"
#include "agent/host/move_pages_call.hpp"
#include "agent/movers/move_pages_mover.hpp"
#include "agent/movers/move_units.hpp"
#include "policy/types.hpp"

namespace kvtier::agent {

DryRunMover::DryRunMover(MovePagesFn query, HostPaths host)
    : reader_(std::move(query)), host_(std::move(host)) {}

MoveStats DryRunMover::move(Pid pid, std::span<const AddrRange> ranges, int to_node) {
  MoveStats st;
  st.requested = count_pages(ranges);
  ++st.calls;
  auto res = reader_.read(pid, ranges);
  if (!res) {
    st.last_errno = res.error().code;
    const bool gone =
        res.error().code == ESRCH || (res.error().code == EINVAL && process_exited(host_, pid));
    if (gone) {
      st.gone = st.requested;
    } else if (res.error().code == EPERM || res.error().code == EACCES) {
      st.permission = st.requested;
    } else {
      st.other = st.requested;
    }
    return st;
  }
  for (const auto& r : *res) {
    for (const auto& [node, bytes] : r.bytes_per_node) {
      if (node == to_node) {
        st.already_there += bytes / kPageSize;
      } else {
        st.moved += bytes / kPageSize;
        st.bytes_moved += bytes;
      }
    }
    st.not_present += r.not_present_bytes / kPageSize;
    st.other += r.other_bytes / kPageSize;
  }
  return st;
}

}  // namespace kvtier::agent
