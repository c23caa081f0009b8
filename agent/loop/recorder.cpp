#include "agent/loop/recorder.hpp"

#include <fmt/core.h>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <cerrno>
#include <expected>
#include <filesystem>
#include <utility>
#include <vector>

#include "agent/host/host_paths.hpp"
#include "agent/host/procfs.hpp"
#include "agent/host/residency.hpp"
#include "agent/loop/loop_state.hpp"
#include "agent/loop/recording.hpp"
#include "agent/loop/target_set.hpp"
#include "policy/error.hpp"
#include "policy/types.hpp"

namespace kvtier::agent {

Result<void> Recorder::start(const std::filesystem::path& path, RecordingLimits limits,
                             TimeNs now) {
  if (open()) {
    return fail(
        fmt::format("a recording is running already ({}): stop it first", writer_->path().string()),
        EBUSY);
  }
  auto w = RecordingWriter::create(path, limits, now);
  if (!w) return std::unexpected(w.error());
  writer_ = std::move(*w);
  recorded_targets_.clear();
  RecStart start{.now = now, .mover = !s_.mover.empty(), .mover_name = s_.mover};
  for (const SourceStatus& src : s_.sources) start.sources.push_back(src.kind);
  write(start, now);
  spdlog::info("recording to {} (at most {} bytes, {} s)", path.string(), limits.max_bytes,
               limits.max_duration / 1'000'000'000);
  return {};
}

void Recorder::stop() {
  if (!open()) return;
  writer_->close("stopped");
  spdlog::info("recording {} stopped: {} records, {} bytes", writer_->path().string(),
               writer_->records(), writer_->bytes());
}

void Recorder::write(const Record& r, TimeNs now) {
  if (!open()) return;  // stopped at a limit meanwhile
  if (!writer_->write(r, now)) {
    spdlog::info("recording {} stopped: {}", writer_->path().string(), writer_->stopped_because());
  }
}

void Recorder::targets(const TargetSet& targets, const HostPaths& paths, TimeNs now) {
  if (!open()) return;
  RecTargets pids;
  for (const auto& [pid, t] : targets.all()) {
    pids.pids.push_back(pid);
    auto it = recorded_targets_.find(pid);
    if (it != recorded_targets_.end() && it->second.first == t.vmas &&
        it->second.second == t.threads) {
      continue;
    }
    RecTarget target{.info = {.pid = pid, .comm = t.comm}, .vmas = t.vmas, .threads = t.threads};
    if (auto info = read_process(paths, pid)) target.info = std::move(*info);
    write(std::move(target), now);
    recorded_targets_[pid] = {t.vmas, t.threads};
  }
  std::erase_if(recorded_targets_, [&](const auto& kv) { return !targets.find(kv.first); });
  write(std::move(pids), now);
}

void Recorder::residency(Pid pid, bool full, const PageMap& map, TimeNs now) {
  if (!open()) return;
  RecResidency r{.pid = pid, .full = full, .huge_blocks = map.huge_blocks};
  r.runs.reserve(map.runs.size());
  for (const auto& run : map.runs) r.runs.push_back({.range = run.range, .node = run.node});
  write(std::move(r), now);
}

void Recorder::flush() {
  if (writer_) writer_->flush();
}

}  // namespace kvtier::agent
