#pragma once
// kvtierd's own CPU priority. It shares the host's CPUs with the workload it
// tiers, and its work (reading residency, planning, migrating) is never more
// urgent than the workload's: an inference engine's threads meet at a barrier
// every operation, so a thread that waits for a CPU kvtierd holds stalls them all.

#include "policy/error.hpp"

namespace kvtier::agent {

// Sets the nice value of every thread of this process (/proc/self/task) to
// `nice` (-20 to 19); threads started later inherit it from the one that starts
// them. A lower value than a thread has needs CAP_SYS_NICE. The error names the
// thread and the errno; threads already set keep the new value.
Result<void> set_own_nice(int nice);

// The nice value of the calling thread.
int own_nice();

}  // namespace kvtier::agent
