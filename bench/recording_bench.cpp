// The recording's cost and replay's speed, from a real recording:
//   recording_bench FILE CONFIG.toml
// prints the CPU time to encode and write every record of FILE again (what
// kvtierd spends recording those steps), the CPU time of replaying FILE with
// CONFIG (the same Controller and planner on the same inputs, without the
// host's syscalls: less than the daemon spent), their ratio (an upper bound
// of the recording's share of the loop's CPU), and replay's wall time.

#include <time.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>

#include <spdlog/spdlog.h>

#include "agent/loop/recording.hpp"
#include "agent/replay/replay.hpp"
#include "policy/config.hpp"

namespace {

double cpu_s() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) / 1e9;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace kvtier;
  spdlog::set_level(spdlog::level::off);
  if (argc != 3) {
    std::fprintf(stderr, "usage: recording_bench FILE CONFIG.toml\n");
    return 2;
  }
  auto rec = agent::read_recording(argv[1]);
  if (!rec) {
    std::fprintf(stderr, "%s\n", rec.error().message.c_str());
    return 1;
  }
  auto cc = policy::load_compiled_config(argv[2]);
  if (!cc) {
    std::fprintf(stderr, "%s: invalid config\n", argv[2]);
    return 1;
  }
  const auto out = std::filesystem::temp_directory_path() /
                   ("kvtier-recording-bench-" + std::to_string(getpid()) + ".kvtrec");
  const double c0 = cpu_s();
  {
    auto w = agent::RecordingWriter::create(out, {.max_bytes = 1ULL << 40}, 0);
    if (!w) {
      std::fprintf(stderr, "%s\n", w.error().message.c_str());
      return 1;
    }
    for (const auto& r : rec->records) (*w)->write(r, 0);
    (*w)->flush();
  }
  const double rec_cpu = cpu_s() - c0;
  std::filesystem::remove(out);
  const auto t0 = std::chrono::steady_clock::now();
  const double c1 = cpu_s();
  auto run = agent::replay(*rec, *cc);
  const double replay_cpu = cpu_s() - c1;
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (!run) {
    std::fprintf(stderr, "%s\n", run.error().message.c_str());
    return 1;
  }
  const double span =
      run->steps.empty()
          ? 0.0
          : static_cast<double>(run->steps.back().now - run->steps.front().now) / 1e9;
  std::printf(
      "recording: %zu records, %.0f bytes over %.1f s of steps (%.2f MB a minute)\n",
      rec->records.size(), static_cast<double>(std::filesystem::file_size(argv[1])), span,
      span > 0 ? static_cast<double>(std::filesystem::file_size(argv[1])) / 1e6 / span * 60 : 0.0);
  std::printf(
      "encode + write: %.4f s CPU; replay (the loop's work on the same inputs): %.4f s CPU\n",
      rec_cpu, replay_cpu);
  std::printf("recording / loop CPU: %.1f%% (an upper bound: the daemon also pays the syscalls)\n",
              replay_cpu > 0 ? 100.0 * rec_cpu / replay_cpu : 0.0);
  std::printf("replay: %.3f s wall for %zu steps and ticks (%.1f s recorded)\n", wall,
              run->steps.size(), span);
  return 0;
}
