// Cuts a recording (kvtierd's, or kvsim's ground truth) for a test fixture:
//   recording_cut IN OUT UNTIL_NS [--drop-batches]
// writes the records of IN up to the first step at or after UNTIL_NS (CLOCK_MONOTONIC, the
// recordings' clock; a step is kept whole) and the accesses records that end by then, with
// kvtier's own encoder (accesses in their smaller form). --drop-batches leaves out the
// sources' batches, which dominate a recording's size: the recorded column (residency answers,
// recorded moves) and its ground-truth scores do not use them; a replay's plans do.

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <variant>

#include "agent/loop/recording.hpp"

int main(int argc, char** argv) {
  using namespace kvtier::agent;
  if (argc < 4 || argc > 5 || (argc == 5 && std::string(argv[4]) != "--drop-batches")) {
    std::fprintf(stderr, "usage: recording_cut IN OUT UNTIL_NS [--drop-batches]\n");
    return 2;
  }
  const bool drop_batches = argc == 5;
  const kvtier::TimeNs until = std::strtoull(argv[3], nullptr, 10);
  auto in = read_recording(argv[1]);
  if (!in) {
    std::fprintf(stderr, "recording_cut: %s\n", in.error().message.c_str());
    return 1;
  }
  auto out = RecordingWriter::create(
      std::filesystem::absolute(argv[2]),
      RecordingLimits{.max_bytes = UINT64_MAX, .max_duration = UINT64_MAX / 2}, 0);
  if (!out) {
    std::fprintf(stderr, "recording_cut: %s\n", out.error().message.c_str());
    return 1;
  }
  std::size_t kept = 0;
  for (const Record& r : in->records) {
    if (const auto* s = std::get_if<RecStep>(&r); s != nullptr && s->now >= until) break;
    if (const auto* a = std::get_if<RecAccesses>(&r); a != nullptr && a->end > until) continue;
    if (drop_batches && std::holds_alternative<RecBatch>(r)) continue;
    if (!(*out)->write(r, 0)) {
      std::fprintf(stderr, "recording_cut: %s\n", (*out)->stopped_because().c_str());
      return 1;
    }
    ++kept;
  }
  (*out)->close("done");
  std::printf("%s: %zu of %zu records\n", argv[2], kept, in->records.size());
  return 0;
}
