#pragma once
// What kvsim writes: its events and stats lines (JSON lines), the corruptions it found, and
// --truth-record's recording of the bytes decode read.

#include <cstdint>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "agent/loop/recording.hpp"
#include "bench/kvsim/simulator.hpp"
#include "policy/types.hpp"

namespace kvtier::bench::kvsim {

namespace kb = kvtier::bench;
using kvtier::TimeNs;
using Json = nlohmann::ordered_json;

// The read_nodes object of a stats line and of the end event: the bytes read per node.
Json read_nodes_json(const kb::SimCounters& c, const kb::SimConfig& cfg, TimeNs query_ns);

class Output {
 public:
  explicit Output(const std::string& stats_path);
  // Start, end and corruption events go to stdout always (a driver reads the pid from there).
  static void event(const Json& j);
  void stats(const Json& j);

 private:
  std::ofstream file_;
};

Json corruption_json(const kb::CorruptionReport& c, const char* event);
// Every corruption the simulator found since the last call: a line on stderr and an event.
void report_corruptions(kb::Simulator& sim);

// --truth-record: the bytes decode read from each chunk of the pool, one window after another,
// as KVTREC accesses records (docs/recording.md), with kvtier's own encoder. kvtierd records
// its steps in another file; kvtierctl replay --truth merges the two by time.
class TruthRecorder {
 public:
  TruthRecorder(const std::string& path, kb::Simulator& sim, kvtier::Pid pid,
                kvtier::AddrRange pool, std::uint64_t chunk_bytes, TimeNs window, TimeNs now);
  // Writes the window that ended by `now`, if one did (or whatever is counted, when `last`).
  void tick(TimeNs now, bool last = false);

 private:
  kb::Simulator& sim_;
  kvtier::Pid pid_;
  kvtier::AddrRange pool_;
  std::uint64_t chunk_bytes_;
  TimeNs window_;
  TimeNs begin_;
  std::unique_ptr<kvtier::agent::RecordingWriter> writer_;
};

}  // namespace kvtier::bench::kvsim
