#include "agent/movers/move_pages_mover.hpp"

#include <numaif.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstddef>
#include <cstdint>
#include <numeric>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "agent/host/host_paths.hpp"
#include "agent/host/move_pages_call.hpp"
#include "agent/host/sysfs.hpp"
#include "agent/movers/move_units.hpp"
#include "policy/error.hpp"
#include "policy/types.hpp"

namespace kvtier::agent {
namespace {

// The kernel leaves a page's status untouched when the batch it was queued in
// failed or was never reached; node ids are small, so this value means "not
// written".
constexpr int kUnset = 0x7fffffff;

AddrRange unit_range(const MoveUnit& u) {
  return {u.addr, u.addr + std::uint64_t{u.pages} * kPageSize};
}

}  // namespace

bool process_exited(const HostPaths& host, Pid pid) {
  auto stat = read_text(host.proc / std::to_string(pid) / "stat");
  if (!stat) return stat.error().code == ENOENT || stat.error().code == ESRCH;
  const auto paren = stat->rfind(')');
  if (paren == std::string::npos || paren + 2 >= stat->size()) return false;
  // After "comm)": state ppid pgrp session tty_nr tpgid flags ...
  std::string_view rest = std::string_view(*stat).substr(paren + 2);
  const char state = rest.front();
  if (state == 'Z' || state == 'X') return true;
  // The mm goes (exit_mm) before the task turns zombie: PF_EXITING covers that window.
  constexpr std::uint64_t kPfExiting = 0x4;
  for (int field = 0; field < 6; ++field) {
    const auto sp = rest.find(' ');
    if (sp == std::string_view::npos) return false;
    rest.remove_prefix(sp + 1);
  }
  std::uint64_t flags = 0;
  const auto end = rest.find(' ');
  const std::string_view flags_s = rest.substr(0, end);
  const auto [ptr, ec] = std::from_chars(flags_s.data(), flags_s.data() + flags_s.size(), flags);
  return ec == std::errc{} && (flags & kPfExiting) != 0;
}

MovePagesMover::MovePagesMover(MovePagesConfig config, MovePagesDeps deps)
    : config_(config),
      deps_(std::move(deps)),
      pinned_(config.pinned_ttl_ns),
      node_full_(config.node_full_retry_ns) {}

bool MovePagesMover::process_gone(Pid pid) const {
  return process_exited(deps_.host, pid);
}

MovePagesMover::Stop MovePagesMover::call_failed(Pid pid, int err, MoveStats& st) {
  st.last_errno = err;
  switch (err) {
    case ESRCH:
      spdlog::debug("move_pages: pid {} exited; its remaining pages count as gone", pid);
      return Stop::kGone;
    case EINVAL:
      // An exited but not yet reaped process has no mm: the kernel says EINVAL.
      if (process_gone(pid)) {
        spdlog::debug("move_pages: pid {} is a zombie; its remaining pages count as gone", pid);
        return Stop::kGone;
      }
      spdlog::warn("move_pages: pid {}: {} (EINVAL); check the target node id", pid,
                   errno_text(err));
      return Stop::kOther;
    case EPERM:
    case EACCES:
      spdlog::warn(
          "move_pages: pid {}: {}; kvtierd needs CAP_SYS_NICE and the target node in the "
          "process's cpuset.mems",
          pid, errno_text(err));
      return Stop::kPermission;
    case ENODEV:
      spdlog::warn("move_pages: pid {}: target node is offline or has no memory ({})", pid,
                   errno_text(err));
      return Stop::kOther;
    default:
      spdlog::warn("move_pages: pid {}: {} (errno {})", pid, errno_text(err), err);
      return Stop::kOther;
  }
}

std::uint64_t& MovePagesMover::counter_for(Stop stop, MoveStats& st) {
  switch (stop) {
    case Stop::kGone:
      return st.gone;
    case Stop::kNoMemory:
      return st.no_memory;
    case Stop::kPermission:
      return st.permission;
    case Stop::kNo:
    case Stop::kOther:
      break;
  }
  return st.other;
}

// One batch on its way to `to_node`: the units still pending (indexes into
// `units`) and how many move calls left each neither moved nor busy.
struct MovePagesMover::Batch {
  Pid pid;
  int to_node;
  std::span<const MoveUnit> units;
  MoveStats& st;
  std::vector<std::uint32_t> pending;
  std::vector<std::uint8_t> unmoved;

  Batch(Pid p, int to, std::span<const MoveUnit> u, MoveStats& s)
      : pid(p), to_node(to), units(u), st(s), pending(u.size()), unmoved(u.size(), 0) {
    std::iota(pending.begin(), pending.end(), 0U);
  }
  // Every pending unit's pages go to `counter`.
  void count_pending(std::uint64_t& counter) {
    for (const auto idx : pending) counter += units[idx].pages;
    pending.clear();
  }
  void add_moved(const MoveUnit& u) const {
    st.moved += u.pages;
    st.bytes_moved += std::uint64_t{u.pages} * kPageSize;
  }
  // decide(unit, status) for every pending unit, with the status the last
  // call wrote for it; the units it returns true for stay pending.
  template <class Decide>
  void sift(std::span<const int> status, Decide&& decide) {
    std::size_t keep = 0;
    for (std::size_t k = 0; k < pending.size(); ++k) {
      if (decide(units[pending[k]], pending[k], status[k])) pending[keep++] = pending[k];
    }
    pending.resize(keep);
  }
};

// A call failed as a whole: what is pending counts under its cause.
MovePagesMover::Stop MovePagesMover::give_up(Batch& b, int err) {
  const Stop stop = call_failed(b.pid, err, b.st);
  b.count_pending(counter_for(stop, b.st));
  return stop;
}

void MovePagesMover::fill_addrs(const Batch& b) {
  addrs_.resize(b.pending.size());
  for (std::size_t k = 0; k < b.pending.size(); ++k) {
    // move_pages takes addresses as pointers; these are another process's.
    addrs_[k] =
        reinterpret_cast<void*>(b.units[b.pending[k]].addr);  // NOLINT(performance-no-int-to-ptr)
  }
  status_.assign(b.pending.size(), kUnset);
}

// Locates pending units: those on the target are done (already there on the
// first look, moved later); the rest stay pending. A failed query counts what
// is pending under its cause and says why it stopped.
MovePagesMover::Stop MovePagesMover::locate(Batch& b, bool first) {
  fill_addrs(b);
  const auto q = deps_.move_pages(b.pid, addrs_, nullptr, status_, 0);
  ++b.st.calls;
  if (q.ret < 0) return give_up(b, q.err);
  b.sift(status_, [&b, first](const MoveUnit& u, std::uint32_t, int s) {
    if (s == b.to_node) {
      if (first) {
        b.st.already_there += u.pages;
      } else {
        b.add_moved(u);
      }
      return false;
    }
    if (s >= 0 && s != kUnset) return true;
    if (s != kUnset && classify_status(s) == PageStatus::kNotPresent) {
      b.st.not_present += u.pages;
    } else if (s != kUnset && classify_status(s) == PageStatus::kPermission) {
      b.st.permission += u.pages;
      b.st.last_errno = -s;
    } else {
      b.st.other += u.pages;
      b.st.last_errno = s == kUnset ? 0 : -s;
    }
    return false;
  });
  return Stop::kNo;
}

// One move_pages call for every pending unit; what is left stays pending.
MovePagesMover::Stop MovePagesMover::move_once(Batch& b, bool& out_of_memory) {
  fill_addrs(b);
  nodes_.assign(b.pending.size(), b.to_node);
  const int flags = config_.move_shared ? MPOL_MF_MOVE_ALL : MPOL_MF_MOVE;
  const auto m = deps_.move_pages(b.pid, addrs_, nodes_.data(), status_, flags);
  ++b.st.calls;
  out_of_memory = m.ret < 0 && m.err == ENOMEM;
  if (m.ret < 0 && !out_of_memory) return give_up(b, m.err);
  b.sift(status_, [&b, &out_of_memory](const MoveUnit& u, std::uint32_t idx, int s) {
    if (s == b.to_node) {
      b.add_moved(u);
      return false;
    }
    if (s >= 0) {
      ++b.unmoved[idx];
      return true;
    }
    b.st.last_errno = -s;
    switch (classify_status(s)) {
      case PageStatus::kBusy:
        return true;
      case PageStatus::kNotPresent:
        b.st.not_present += u.pages;
        break;
      case PageStatus::kNoMemory:
        b.st.no_memory += u.pages;
        out_of_memory = true;
        break;
      case PageStatus::kPermission:
        b.st.permission += u.pages;
        break;
      case PageStatus::kOnNode:
      case PageStatus::kOther:
        b.st.other += u.pages;
        break;
    }
    return false;
  });
  return Stop::kNo;
}

// Only a CPU-less node (CXL memory) latches when full. On a node with CPUs
// (DRAM) ENOMEM is momentary: the kernel reclaims and demotes there on its own
// and the control loop keeps headroom, so the next promotion may succeed; a
// latch would hold hot pages on the slow node for the whole retry time. A node
// whose cpulist cannot be read latches.
bool MovePagesMover::latches(int node) {
  if (auto it = cpu_less_.find(node); it != cpu_less_.end()) return it->second;
  const auto text =
      read_text(deps_.host.sys / fmt::format("devices/system/node/node{}/cpulist", node));
  const bool cpu_less = !text || text->find_first_not_of(" \n") == std::string::npos;
  cpu_less_.emplace(node, cpu_less);
  return cpu_less;
}

// The target node ran out of memory: demotion to it pauses (a CPU-less node),
// and pages of the failed batch that moved before allocation failed are found
// and counted.
MovePagesMover::Stop MovePagesMover::node_ran_full(Batch& b) {
  b.st.last_errno = ENOMEM;
  if (latches(b.to_node) && node_full_.latch(b.to_node, deps_.clock())) {
    spdlog::warn(
        "move_pages: node {} is full (ENOMEM moving pid {}); demotion to it stops for {} s; "
        "free memory on node {} or lower the demotion watermark",
        b.to_node, b.pid, config_.node_full_retry_ns / 1'000'000'000ULL, b.to_node);
  }
  if (!b.pending.empty()) {
    if (const Stop stop = locate(b, false); stop != Stop::kNo) return stop;
  }
  b.count_pending(b.st.no_memory);
  return Stop::kNoMemory;
}

// After the last attempt: a unit no call moved (and none called busy) is
// pinned and skipped for a while; the others were busy and are tried again.
void MovePagesMover::settle(Batch& b) {
  const TimeNs now = deps_.clock();
  for (const auto idx : b.pending) {
    const MoveUnit& u = b.units[idx];
    if (b.unmoved[idx] >= config_.max_attempts) {
      b.st.pinned += u.pages;
      pinned_.mark(b.pid, u.addr, now);
      refused_.emplace_back(b.pid, unit_range(u));
    } else {
      b.st.busy += u.pages;
    }
  }
  b.pending.clear();
}

MovePagesMover::Stop MovePagesMover::move_batch(Pid pid, std::span<const MoveUnit> units,
                                                int to_node, bool located, MoveStats& st) {
  Batch b(pid, to_node, units, st);
  for (int attempt = 0;; ++attempt) {
    // A located batch needs no first look: its caller has just read it.
    if (attempt > 0 || !located) {
      if (const Stop stop = locate(b, attempt == 0); stop != Stop::kNo) return stop;
    }
    if (b.pending.empty()) return Stop::kNo;
    if (attempt >= config_.max_attempts) break;
    bool out_of_memory = false;
    if (const Stop stop = move_once(b, out_of_memory); stop != Stop::kNo) return stop;
    if (out_of_memory) return node_ran_full(b);
    if (b.pending.empty()) return Stop::kNo;
  }
  settle(b);
  return Stop::kNo;
}

std::vector<std::pair<Pid, AddrRange>> MovePagesMover::take_refused() {
  return std::exchange(refused_, {});
}

MoveStats MovePagesMover::move(Pid pid, std::span<const AddrRange> ranges, int to_node) {
  MoveStats st;
  st.requested = count_pages(ranges);
  if (st.requested == 0 || node_full_.is_full(to_node, deps_.clock())) {
    return move_units(pid, {}, to_node, false, st);
  }
  std::vector<std::uint64_t> blocks;
  if (deps_.huge) {
    for (const auto& r : ranges) {
      auto found = deps_.huge->huge_blocks(pid, r);
      if (!found) {
        // The process may have exited; move_pages will say so for every page.
        spdlog::debug("move_pages: huge page probe for pid {}: {}", pid, found.error().message);
        blocks.clear();
        break;
      }
      blocks.insert(blocks.end(), found->begin(), found->end());
    }
    std::ranges::sort(blocks);
    const auto dup = std::ranges::unique(blocks);
    blocks.erase(dup.begin(), dup.end());
  }
  return move_units(pid, split_units(ranges, blocks), to_node, false, st);
}

MoveStats MovePagesMover::move_located(Pid pid, std::span<const AddrRange> ranges, int to_node,
                                       std::span<const std::uint64_t> huge_blocks) {
  MoveStats st;
  st.requested = count_pages(ranges);
  auto units = split_units(ranges, huge_blocks, PartialHuge::kSkip, &st.partial_huge);
  return move_units(pid, std::move(units), to_node, true, st);
}

MoveStats MovePagesMover::move_units(Pid pid, std::vector<MoveUnit> units, int to_node,
                                     bool located, MoveStats st) {
  if (st.requested == 0) return st;
  const TimeNs now = deps_.clock();
  if (node_full_.is_full(to_node, now)) {
    st = MoveStats{.requested = st.requested, .no_memory = st.requested, .last_errno = ENOMEM};
    return st;
  }
  std::erase_if(units, [&](const MoveUnit& u) {
    const bool pinned = pinned_.contains(pid, u.addr, now);
    if (pinned) {
      st.pinned += u.pages;
      refused_.emplace_back(pid, unit_range(u));
    }
    return pinned;
  });
  const std::size_t batch = std::max<std::size_t>(1, config_.batch_units);
  for (std::size_t off = 0; off < units.size(); off += batch) {
    const auto this_batch =
        std::span<const MoveUnit>(units).subspan(off, std::min(batch, units.size() - off));
    const Stop stop = move_batch(pid, this_batch, to_node, located, st);
    if (stop == Stop::kNo) continue;
    auto& counter = counter_for(stop, st);
    for (std::size_t i = off + this_batch.size(); i < units.size(); ++i) counter += units[i].pages;
    if (stop == Stop::kGone) pinned_.forget(pid);
    break;
  }
  return st;
}

}  // namespace kvtier::agent
