#pragma once
// Whether a mechanism (a hotness source, a mover, the process watcher) can run
// on this host, and why not: every probe answers with one of these.

#include <string>
#include <utility>

namespace kvtier::agent {

// `why` is one line naming the missing piece (no BTF, no CAP_BPF, no PMU
// event, no DAMON vaddr, ...), or saying what works.
struct Availability {
  bool ok = false;
  std::string why;
  // Refused for a capability this process lacks (the host has the mechanism).
  bool missing_capability = false;
  // The kernel refuses it here and now, though kvtier could use it: another
  // user holds it (DAMON busy), a lockdown mode bars it, or the kernel's BTF is
  // missing. kvtierd runs with what is left and says so in `kvtierctl status`
  // and kvtier_source_refused, not only in its start-up line.
  bool kernel_refuses = false;
};

inline Availability available(std::string why = "ok") {
  return {.ok = true, .why = std::move(why)};
}
inline Availability unavailable(std::string why) {
  return {.ok = false, .why = std::move(why)};
}
inline Availability refused_by_kernel(std::string why) {
  return {.ok = false, .why = std::move(why), .kernel_refuses = true};
}

}  // namespace kvtier::agent
