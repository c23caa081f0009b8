#pragma once
// What the page-table sources (idle, dirty) share: a scan visits every target
// within one page budget for all of them.

#include <cerrno>
#include <cstdint>
#include <span>

#include "policy/error.hpp"
#include "policy/types.hpp"

namespace kvtier::agent {

// Calls scan(pid, budget) for each target; `budget` (pages, all targets
// together) starts at `max_pages`. A target that exited since set_targets() is
// skipped, not fatal.
template <class Scan>
Result<void> scan_targets(std::span<const Pid> targets, std::uint64_t max_pages, Scan&& scan) {
  std::uint64_t budget = max_pages;
  for (const Pid pid : targets) {
    if (auto ok = scan(pid, budget); !ok && ok.error().code != ENOENT && ok.error().code != ESRCH) {
      return ok;
    }
  }
  return {};
}

}  // namespace kvtier::agent
