#pragma once
// kvsim's ground truth, live: a small file that kvsim maps shared (`--live-truth FILE`) and
// updates as it touches blocks, so that another process (the benchmark's oracle placer,
// bench/oracle) can read which blocks are hot right now without asking kvsim anything and
// without costing kvsim more than one store per touched block.
//
// The file is this ABI, fixed-width and little-endian (writer and reader run on one machine):
//   LiveTruthHeader                       (header_bytes, 8-byte aligned)
//   std::uint64_t last_access_ns[blocks]  CLOCK_MONOTONIC of each block's last read or write
// Block b's bytes are, for every tensor t, [pool_start + t * tensor_bytes + b * chunk_bytes,
// + chunk_bytes): the layout of bench/kvsim/kv_pool.hpp. The writer fills the header, then the
// times, then sets `ready` to 1; a reader refuses the file until then. The times are 8-byte
// aligned words written and read with relaxed atomics: a reader sees each one whole, old or new.

#include <cstdint>
#include <filesystem>
#include <span>
#include <vector>

#include "policy/error.hpp"
#include "policy/types.hpp"

namespace kvtier::bench {

inline constexpr std::uint64_t kLiveTruthMagic = 0x3154'4c4d'4953'564bULL;  // "KVSIMLT1"
inline constexpr std::uint32_t kLiveTruthVersion = 1;

struct LiveTruthHeader {
  std::uint64_t magic = kLiveTruthMagic;
  std::uint32_t version = kLiveTruthVersion;
  std::uint32_t header_bytes = sizeof(LiveTruthHeader);
  std::int64_t pid = 0;  // the kvsim process whose pool this describes
  std::uint64_t pool_start = 0;
  std::uint64_t pool_end = 0;
  std::uint32_t blocks = 0;
  std::uint32_t tensors = 0;
  std::uint64_t chunk_bytes = 0;   // one block in one tensor
  std::uint64_t tensor_bytes = 0;  // blocks x chunk_bytes
  std::uint64_t created_ns = 0;    // when the pool was faulted in (untouched blocks carry it)
  std::uint64_t ready = 0;         // 1 once the header and every time are written
};
static_assert(sizeof(LiveTruthHeader) % 8 == 0);

// kvsim's side: creates (or replaces) the file, sized for `h.blocks`, with every block's time
// set to h.created_ns.
class LiveTruthWriter {
 public:
  static Result<LiveTruthWriter> create(const std::filesystem::path& path,
                                        const LiveTruthHeader& h);
  LiveTruthWriter(const LiveTruthWriter&) = delete;
  LiveTruthWriter& operator=(const LiveTruthWriter&) = delete;
  LiveTruthWriter(LiveTruthWriter&& other) noexcept;
  LiveTruthWriter& operator=(LiveTruthWriter&& other) noexcept;
  ~LiveTruthWriter();

  // The shared times, one per block, for GroundTruth::mirror_to().
  [[nodiscard]] std::span<std::uint64_t> last_access() const { return times_; }

 private:
  LiveTruthWriter(void* map, std::size_t length, std::span<std::uint64_t> times)
      : map_(map), length_(length), times_(times) {}
  void* map_ = nullptr;
  std::size_t length_ = 0;
  std::span<std::uint64_t> times_;
};

// The reader's side (read-only mapping).
class LiveTruthReader {
 public:
  static Result<LiveTruthReader> open(const std::filesystem::path& path);
  LiveTruthReader(const LiveTruthReader&) = delete;
  LiveTruthReader& operator=(const LiveTruthReader&) = delete;
  LiveTruthReader(LiveTruthReader&& other) noexcept;
  LiveTruthReader& operator=(LiveTruthReader&& other) noexcept;
  ~LiveTruthReader();

  [[nodiscard]] const LiveTruthHeader& header() const { return header_; }
  // Copies every block's last access time into `out` (resized to the block count).
  void read(std::vector<TimeNs>& out) const;

 private:
  LiveTruthReader(const void* map, std::size_t length, const LiveTruthHeader& h)
      : map_(map), length_(length), header_(h) {}
  const void* map_ = nullptr;
  std::size_t length_ = 0;
  LiveTruthHeader header_;
};

}  // namespace kvtier::bench
