#pragma once
// The loop's recorder: what every step sees, appended to a recording
// (recording.hpp) while one runs. Without one nothing is built: a step's
// batches, plan and topology are not copied for nothing.

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "agent/host/host_paths.hpp"
#include "agent/host/residency.hpp"
#include "agent/loop/loop_state.hpp"
#include "agent/loop/recording.hpp"
#include "agent/loop/target_set.hpp"

namespace kvtier::agent {

class Recorder {
 public:
  // `state`: the loop's, whose sources and mover open each recording (RecStart).
  explicit Recorder(const LoopState& state) : s_(state) {}
  // Records what every step sees from now on into a new file at `path`, until
  // stop() or a limit. One recording at a time: EBUSY while one runs.
  Result<void> start(const std::filesystem::path& path, RecordingLimits limits, TimeNs now);
  // Closes the running recording, if any.
  void stop();
  [[nodiscard]] bool open() const { return writer_ && writer_->open(); }
  // The recording running or the last one (closed: open() is false); null if none.
  [[nodiscard]] const RecordingWriter* writer() const { return writer_.get(); }
  // Appends the record `make()` builds, if a recording runs; else builds nothing.
  template <class Make>
  void rec(TimeNs now, Make&& make) {
    if (open()) write(make(), now);
  }
  // Appends `r`, if a recording runs (it stops at a limit).
  void write(const Record& r, TimeNs now);
  // Targets that joined (their process facts, for the config's selectors), and
  // tracked mappings and thread counts that changed since the recording last said.
  void targets(const TargetSet& targets, const HostPaths& paths, TimeNs now);
  void residency(Pid pid, bool full, const PageMap& map, TimeNs now);
  // The end of a step or a promotion tick: what was written reaches the file.
  void flush();

 private:
  const LoopState& s_;
  std::unique_ptr<RecordingWriter> writer_;
  // What the recording has said of each target (its mappings and thread count), to
  // write changes only.
  std::map<Pid, std::pair<std::vector<AddrRange>, std::uint32_t>> recorded_targets_;
};

}  // namespace kvtier::agent
