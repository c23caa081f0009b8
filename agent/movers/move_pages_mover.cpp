#include "agent/movers/move_pages_mover.hpp"

#include <numaif.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <numeric>
#include <string>

#include <spdlog/spdlog.h>

#include "agent/host/sysfs.hpp"

namespace kvtier::agent {
namespace {

// The kernel leaves a page's status untouched when the batch it was queued in
// failed or was never reached; node ids are small, so this value means "not
// written".
constexpr int kUnset = 0x7fffffff;
constexpr double kMiB = 1024.0 * 1024.0;

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
      limiter_(config.rate_mib_s * kMiB, config.burst_mib * kMiB, deps_.clock()),
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

MovePagesMover::Stop MovePagesMover::move_batch(Pid pid, std::span<const MoveUnit> units,
                                                int to_node, MoveStats& st) {
  const int flags = config_.move_shared ? MPOL_MF_MOVE_ALL : MPOL_MF_MOVE;
  std::vector<std::uint32_t> pending(units.size());
  std::iota(pending.begin(), pending.end(), 0U);
  // Move calls after which a unit was neither moved nor reported busy: the
  // kernel tried it and gave up (or never reached it; that does not repeat).
  std::vector<std::uint8_t> unmoved(units.size(), 0);

  const auto count_pending = [&](std::uint64_t& counter) {
    for (const auto idx : pending) counter += units[idx].pages;
    pending.clear();
  };
  const auto fill_addrs = [&] {
    addrs_.resize(pending.size());
    for (std::size_t k = 0; k < pending.size(); ++k) {
      // move_pages takes addresses as pointers; these are another process's.
      addrs_[k] =
          reinterpret_cast<void*>(units[pending[k]].addr);  // NOLINT(performance-no-int-to-ptr)
    }
    status_.assign(pending.size(), kUnset);
  };
  const auto add_moved = [&](const MoveUnit& u) {
    st.moved += u.pages;
    st.bytes_moved += std::uint64_t{u.pages} * kPageSize;
  };
  // Locates pending units: those on the target are done (already there on the
  // first look, moved later); the rest stay pending. False if the call failed.
  Stop query_stop = Stop::kNo;
  const auto locate = [&](bool first) -> bool {
    fill_addrs();
    const auto q = deps_.move_pages(pid, addrs_, nullptr, status_, 0);
    ++st.calls;
    if (q.ret < 0) {
      query_stop = call_failed(pid, q.err, st);
      return false;
    }
    std::size_t keep = 0;
    for (std::size_t k = 0; k < pending.size(); ++k) {
      const auto idx = pending[k];
      const int s = status_[k];
      if (s == to_node) {
        if (first) {
          st.already_there += units[idx].pages;
        } else {
          add_moved(units[idx]);
        }
      } else if (s >= 0 && s != kUnset) {
        pending[keep++] = idx;
      } else if (s != kUnset && classify_status(s) == PageStatus::kNotPresent) {
        st.not_present += units[idx].pages;
      } else if (s != kUnset && classify_status(s) == PageStatus::kPermission) {
        st.permission += units[idx].pages;
        st.last_errno = -s;
      } else {
        st.other += units[idx].pages;
        st.last_errno = s == kUnset ? 0 : -s;
      }
    }
    pending.resize(keep);
    return true;
  };

  for (int attempt = 0;; ++attempt) {
    if (!locate(attempt == 0)) {
      count_pending(counter_for(query_stop, st));
      return query_stop;
    }
    if (pending.empty()) return Stop::kNo;
    if (attempt >= config_.max_attempts) break;

    if (attempt == 0 && !limiter_.unlimited()) {
      std::uint64_t bytes = 0;
      for (const auto idx : pending) bytes += std::uint64_t{units[idx].pages} * kPageSize;
      const TimeNs wait = limiter_.reserve(bytes, deps_.clock());
      if (wait > 0) {
        deps_.sleep(wait);
        st.throttled_ns += wait;
      }
    }

    fill_addrs();
    nodes_.assign(pending.size(), to_node);
    const auto m = deps_.move_pages(pid, addrs_, nodes_.data(), status_, flags);
    ++st.calls;
    bool out_of_memory = m.ret < 0 && m.err == ENOMEM;
    if (m.ret < 0 && !out_of_memory) {
      const Stop stop = call_failed(pid, m.err, st);
      count_pending(counter_for(stop, st));
      return stop;
    }
    std::size_t keep = 0;
    for (std::size_t k = 0; k < pending.size(); ++k) {
      const auto idx = pending[k];
      const int s = status_[k];
      if (s == to_node) {
        add_moved(units[idx]);
        continue;
      }
      if (s >= 0) {
        ++unmoved[idx];
        pending[keep++] = idx;
        continue;
      }
      st.last_errno = -s;
      switch (classify_status(s)) {
        case PageStatus::kBusy:
          pending[keep++] = idx;
          break;
        case PageStatus::kNotPresent:
          st.not_present += units[idx].pages;
          break;
        case PageStatus::kNoMemory:
          st.no_memory += units[idx].pages;
          out_of_memory = true;
          break;
        case PageStatus::kPermission:
          st.permission += units[idx].pages;
          break;
        case PageStatus::kOnNode:
        case PageStatus::kOther:
          st.other += units[idx].pages;
          break;
      }
    }
    pending.resize(keep);
    if (pending.empty() && !out_of_memory) return Stop::kNo;

    if (out_of_memory) {
      st.last_errno = ENOMEM;
      if (node_full_.latch(to_node, deps_.clock())) {
        spdlog::warn(
            "move_pages: node {} is full (ENOMEM moving pid {}); demotion to it stops for {} s; "
            "free memory on node {} or lower the demotion watermark",
            to_node, pid, config_.node_full_retry_ns / 1'000'000'000ULL, to_node);
      }
      // Pages of the failed batch may have moved before allocation failed.
      if (!pending.empty() && !locate(false)) {
        count_pending(counter_for(query_stop, st));
        return query_stop;
      }
      count_pending(st.no_memory);
      return Stop::kNoMemory;
    }
  }

  const TimeNs now = deps_.clock();
  for (const auto idx : pending) {
    if (unmoved[idx] >= config_.max_attempts) {
      st.pinned += units[idx].pages;
      pinned_.mark(pid, units[idx].addr, now);
    } else {
      st.busy += units[idx].pages;
    }
  }
  pending.clear();
  return Stop::kNo;
}

MoveStats MovePagesMover::move(Pid pid, std::span<const AddrRange> ranges, int to_node) {
  MoveStats st;
  st.requested = count_pages(ranges);
  if (st.requested == 0) return st;
  const TimeNs now = deps_.clock();
  if (node_full_.is_full(to_node, now)) {
    st.no_memory = st.requested;
    st.last_errno = ENOMEM;
    return st;
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
    std::sort(blocks.begin(), blocks.end());
    blocks.erase(std::unique(blocks.begin(), blocks.end()), blocks.end());
  }
  const auto units = split_units(ranges, blocks);

  std::vector<MoveUnit> todo;
  todo.reserve(units.size());
  for (const auto& u : units) {
    if (pinned_.contains(pid, u.addr, now)) {
      st.pinned += u.pages;
    } else {
      todo.push_back(u);
    }
  }

  const std::size_t batch = std::max<std::size_t>(1, config_.batch_units);
  for (std::size_t off = 0; off < todo.size(); off += batch) {
    const auto this_batch =
        std::span<const MoveUnit>(todo).subspan(off, std::min(batch, todo.size() - off));
    const Stop stop = move_batch(pid, this_batch, to_node, st);
    if (stop == Stop::kNo) continue;
    auto& counter = counter_for(stop, st);
    for (std::size_t i = off + this_batch.size(); i < todo.size(); ++i) counter += todo[i].pages;
    if (stop == Stop::kGone) pinned_.forget(pid);
    break;
  }
  return st;
}

}  // namespace kvtier::agent
