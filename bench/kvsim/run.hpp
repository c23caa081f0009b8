#pragma once
// One kvsim run: the model scaled to the budget, the trace, the pool, the start event, then
// decode paced to the trace until it ends, the --duration passes or a signal stops it.

#include "bench/kvsim/options.hpp"

namespace kvtier::bench::kvsim {

// The exit status: kExitOk, or kExitCorrupt when a read found corrupted KV data. Throws, with
// one line naming what to fix, when the run cannot start.
int run(const Options& o);

}  // namespace kvtier::bench::kvsim
