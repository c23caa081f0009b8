#pragma once
// Time for the agent, injectable so rate limits and expiries are tested
// without sleeping.

#include <functional>

#include "policy/types.hpp"

namespace kvtier::agent {

using Clock = std::function<TimeNs()>;
using Sleeper = std::function<void(TimeNs)>;

// CLOCK_MONOTONIC, the clock every TimeNs in kvtier is read from.
TimeNs monotonic_now();
void sleep_for_ns(TimeNs ns);
// User plus system CPU time this process has used, all threads
// (CLOCK_PROCESS_CPUTIME_ID), in ns and in seconds.
TimeNs process_cpu_now();
double process_cpu_seconds();
// User plus system CPU time the calling thread has used (CLOCK_THREAD_CPUTIME_ID):
// the kernel's work in its syscalls (page-table walks, writes) included.
TimeNs thread_cpu_now();

}  // namespace kvtier::agent
