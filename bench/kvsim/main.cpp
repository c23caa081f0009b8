// kvsim: a KV-cache workload simulator. It holds a vLLM-style paged KV cache in its own memory
// and reads and writes it the way decode does, driven by a real request trace, so that a
// tiering daemon sees the access pattern of an inference server. Every read is checked against
// a deterministic pattern; the ground truth of which blocks were touched when is written out.
//
// Output: JSON lines on stdout ({"event":"start"|"stats"|"corruption"|"injected"|"truth"|"end"}),
// stats optionally to --stats FILE. Exit status: 0 success, 1 error, 2 bad usage, 3 corruption.

#include "bench/kvsim/options.hpp"
#include "bench/kvsim/run.hpp"
#include "bench/main_guard.hpp"

int main(int argc, char** argv) {
  namespace ks = kvtier::bench::kvsim;
  return kvtier::bench::guarded_main("kvsim", ks::kExitFailed, [&] {
    ks::Options o;
    if (auto rc = ks::parse_command_line(argc, argv, o)) return *rc;
    return ks::run(o);
  });
}
