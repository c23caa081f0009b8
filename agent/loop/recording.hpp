#pragma once
// The recording of a control loop: what every step saw (topology and free
// memory, the targets and their tracked mappings, each source's batch, every
// residency query's answer), the plan it made and what the mover reported.
// A versioned binary file (docs/recording.md): an 16-byte header, then
// length-prefixed records. The boundary is the Controller's own: replay
// (agent/replay) feeds these inputs back into the same Controller and planner.

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <string>
#include <variant>
#include <vector>

#include "agent/sources/hotness_source.hpp"
#include "policy/config.hpp"
#include "policy/error.hpp"
#include "policy/topology.hpp"
#include "policy/types.hpp"

namespace kvtier::agent {

inline constexpr char kRecordingMagic[8] = {'K', 'V', 'T', 'R', 'E', 'C', '\0', '\n'};
// 2: a topology record gives each node's reserved free memory too (NumaNode::
// mem_reserved_bytes); version 1 files still read, with none reserved.
// 3: a target record gives the process's thread count too (RecTarget::threads);
// older files read with it unknown (0).
inline constexpr std::uint32_t kRecordingVersion = 3;
inline constexpr std::uint32_t kOldestRecordingVersion = 1;

enum class RecordType : std::uint8_t {
  kStart = 1,
  kStep = 2,
  kTopology = 3,
  kTarget = 4,
  kTargets = 5,
  kBatch = 6,
  kResidency = 7,
  kPlan = 8,
  kMove = 9,
  kAccesses = 10,
  kAccessesSparse = 11,  // a RecAccesses too, written so when that is smaller
};

// Once, first: the sources the loop runs (their order is the batches' index)
// and whether it has a mover.
struct RecStart {
  TimeNs now = 0;
  std::vector<SourceKind> sources;
  bool mover = false;
  std::string mover_name;
};

enum class StepKind : std::uint8_t { kStep = 0, kPromote = 1 };

// A step (or a promotion tick) begins; the records up to the next RecStep are its.
struct RecStep {
  TimeNs now = 0;
  StepKind kind = StepKind::kStep;
  bool paused = false;
};

struct RecTopology {
  policy::Topology topology;
};

// A target's process facts (when it joins), its tracked mappings or its thread
// count (when they change).
struct RecTarget {
  policy::ProcessInfo info;
  std::vector<AddrRange> vmas;
  std::uint32_t threads = 0;  // Threads: of /proc/PID/status; 0: unknown (version < 3)
};

// The pids that are targets after this step's discovery.
struct RecTargets {
  std::vector<Pid> pids;
};

// What source `source` (index into RecStart::sources) returned from collect().
struct RecBatch {
  std::uint32_t source = 0;
  SourceBatch batch;
};

// One residency query: the ranges asked about, the runs found, the huge pages.
struct RecResidency {
  struct Run {
    AddrRange range;
    std::int32_t node = -1;
  };
  Pid pid = 0;
  bool full = false;  // every tracked page (else: the pages sampled since the last read)
  std::vector<Run> runs;
  std::vector<std::uint64_t> huge_blocks;
};

struct RecPlan {
  Plan plan;  // PlannedMove::why is not recorded
};

// One mover call and its outcome.
struct RecMove {
  Pid pid = 0;
  std::int32_t to_node = 0;
  bool demotion = true;
  std::vector<AddrRange> ranges;
  MoveStats stats;
};

// Ground truth from a workload that knows its own accesses (kvsim): bytes read
// per block of the pool during [begin, end) of the same clock (CLOCK_MONOTONIC).
// Written as type 10 (every block) or 11 (the blocks read only), whichever is
// smaller; both read back as this.
struct RecAccesses {
  Pid pid = 0;
  TimeNs begin = 0;
  TimeNs end = 0;
  std::uint64_t base = 0;                 // the pool's first address
  std::uint64_t block_bytes = 0;          // bytes per block
  std::vector<std::uint64_t> bytes_read;  // per block
};

using Record = std::variant<RecStart, RecStep, RecTopology, RecTarget, RecTargets, RecBatch,
                            RecResidency, RecPlan, RecMove, RecAccesses>;

// The payload and type of one record, as written to the file.
std::vector<std::uint8_t> encode(const Record& r);
RecordType type_of(const Record& r);

// Every record of a recording file. A truncated last record (the daemon was
// killed mid-write) is dropped and said in `note`; anything else malformed is
// an error naming the file and the byte offset.
struct Recording {
  std::vector<Record> records;
  std::string note;
};
Result<Recording> read_recording(const std::filesystem::path& path);
Result<Recording> parse_recording(std::span<const std::uint8_t> bytes, const std::string& what);

struct RecordingLimits {
  std::uint64_t max_bytes = 64ULL << 20;
  TimeNs max_duration = 600'000'000'000;  // 10 minutes
};

// Writes records to a new file until stopped or a limit is reached. Created
// exclusively (an existing file is never overwritten, a symlink never followed).
class RecordingWriter {
 public:
  static Result<std::unique_ptr<RecordingWriter>> create(const std::filesystem::path& path,
                                                         RecordingLimits limits, TimeNs now);
  ~RecordingWriter();
  RecordingWriter(const RecordingWriter&) = delete;
  RecordingWriter& operator=(const RecordingWriter&) = delete;

  // False once the recording has stopped (a limit, a write error): the caller drops it.
  bool write(const Record& r, TimeNs now);
  // Flushes what is buffered (at the end of every step).
  void flush();
  void close(const std::string& why);

  [[nodiscard]] bool open() const { return file_ != nullptr; }
  [[nodiscard]] const std::filesystem::path& path() const { return path_; }
  [[nodiscard]] std::uint64_t bytes() const { return bytes_; }
  [[nodiscard]] std::uint64_t records() const { return records_; }
  [[nodiscard]] TimeNs started() const { return started_; }
  [[nodiscard]] const std::string& stopped_because() const { return stopped_because_; }
  // CPU time spent encoding and writing (the recording's cost), in ns.
  [[nodiscard]] std::uint64_t cpu_ns() const { return cpu_ns_; }

 private:
  RecordingWriter(std::filesystem::path path, std::FILE* file, RecordingLimits limits, TimeNs now);
  std::filesystem::path path_;
  std::FILE* file_;
  RecordingLimits limits_;
  TimeNs started_;
  std::uint64_t bytes_ = 0;
  std::uint64_t records_ = 0;
  std::uint64_t cpu_ns_ = 0;
  std::string stopped_because_;
};

}  // namespace kvtier::agent
