#include "agent/loop/recording.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>
#include <optional>
#include <type_traits>

#include "policy/error.hpp"
#include "policy/topology.hpp"
#include "policy/types.hpp"

namespace kvtier::agent {
namespace {

// Little-endian fixed-width fields (the file is read on the same kind of host).
class Out {
 public:
  std::vector<std::uint8_t> bytes;
  void u8(std::uint8_t v) { bytes.push_back(v); }
  void u32(std::uint32_t v) { put(&v, sizeof v); }
  void u64(std::uint64_t v) { put(&v, sizeof v); }
  void i32(std::int32_t v) { put(&v, sizeof v); }
  void f64(double v) { put(&v, sizeof v); }
  void str(const std::string& s) {
    u32(static_cast<std::uint32_t>(s.size()));
    put(s.data(), s.size());
  }
  void range(const AddrRange& r) {
    u64(r.start);
    u64(r.end);
  }
  void ranges(const std::vector<AddrRange>& rs) {
    u32(static_cast<std::uint32_t>(rs.size()));
    for (const auto& r : rs) range(r);
  }
  void opt(const std::optional<std::uint64_t>& v) {
    u8(v ? 1 : 0);
    u64(v.value_or(0));
  }

 private:
  void put(const void* p, std::size_t n) {
    const auto* b = static_cast<const std::uint8_t*>(p);
    bytes.insert(bytes.end(), b, b + n);
  }
};

class In {
 public:
  explicit In(std::span<const std::uint8_t> b) : b_(b) {}
  bool ok() const { return ok_; }
  void fail() { ok_ = false; }
  bool done() const { return pos_ == b_.size(); }
  std::uint8_t u8() {
    std::uint8_t v = 0;
    get(&v, 1);
    return v;
  }
  std::uint32_t u32() {
    std::uint32_t v = 0;
    get(&v, sizeof v);
    return v;
  }
  std::uint64_t u64() {
    std::uint64_t v = 0;
    get(&v, sizeof v);
    return v;
  }
  std::int32_t i32() {
    std::int32_t v = 0;
    get(&v, sizeof v);
    return v;
  }
  double f64() {
    double v = 0;
    get(&v, sizeof v);
    return v;
  }
  std::string str() {
    const std::uint32_t n = u32();
    if (!ok_ || n > b_.size() - pos_) {
      ok_ = false;
      return {};
    }
    std::string s(reinterpret_cast<const char*>(b_.data() + pos_), n);
    pos_ += n;
    return s;
  }
  AddrRange range() {
    const std::uint64_t s = u64();
    return {s, u64()};
  }
  // A count of items of at least `item_bytes` each, refused when the rest cannot hold them.
  std::uint32_t count(std::size_t item_bytes) {
    const std::uint32_t n = u32();
    if (!ok_ || static_cast<std::uint64_t>(n) * item_bytes > b_.size() - pos_) {
      ok_ = false;
      return 0;
    }
    return n;
  }
  std::vector<AddrRange> ranges() {
    std::vector<AddrRange> out(count(16));
    for (auto& r : out) r = range();
    return out;
  }
  std::optional<std::uint64_t> opt() {
    const bool has = u8() != 0;
    const std::uint64_t v = u64();
    return has ? std::optional<std::uint64_t>(v) : std::nullopt;
  }

 private:
  void get(void* p, std::size_t n) {
    if (!ok_ || n > b_.size() - pos_) {
      ok_ = false;
      std::memset(p, 0, n);
      return;
    }
    std::memcpy(p, b_.data() + pos_, n);
    pos_ += n;
  }
  std::span<const std::uint8_t> b_;
  std::size_t pos_ = 0;
  bool ok_ = true;
};

void put_stats(Out& o, const MoveStats& s) {
  for (std::uint64_t v :
       {s.requested, s.moved, s.already_there, s.busy, s.pinned, s.not_present, s.gone, s.no_memory,
        s.permission, s.other, s.partial_huge, s.bytes_moved, s.calls}) {
    o.u64(v);
  }
  o.i32(s.last_errno);
}

MoveStats get_stats(In& in) {
  MoveStats s;
  for (std::uint64_t* v :
       {&s.requested, &s.moved, &s.already_there, &s.busy, &s.pinned, &s.not_present, &s.gone,
        &s.no_memory, &s.permission, &s.other, &s.partial_huge, &s.bytes_moved, &s.calls}) {
    *v = in.u64();
  }
  s.last_errno = in.i32();
  return s;
}

void put(Out& o, const RecStart& r) {
  o.u64(r.now);
  o.u32(static_cast<std::uint32_t>(r.sources.size()));
  for (auto k : r.sources) o.u8(static_cast<std::uint8_t>(k));
  o.u8(r.mover ? 1 : 0);
  o.str(r.mover_name);
}
void put(Out& o, const RecStep& r) {
  o.u64(r.now);
  o.u8(static_cast<std::uint8_t>(r.kind));
  o.u8(r.paused ? 1 : 0);
}
void put(Out& o, const RecTopology& r) {
  o.u32(static_cast<std::uint32_t>(r.topology.nodes.size()));
  for (const auto& n : r.topology.nodes) {
    o.i32(n.id);
    o.u32(static_cast<std::uint32_t>(n.cpus.size()));
    for (int c : n.cpus) o.i32(c);
    o.u64(n.mem_total_bytes);
    o.u64(n.mem_free_bytes);
    o.u32(static_cast<std::uint32_t>(n.distance.size()));
    for (const auto& [to, d] : n.distance) {
      o.i32(to);
      o.i32(d);
    }
    o.u8(n.access ? 1 : 0);
    const policy::AccessAttrs a = n.access.value_or(policy::AccessAttrs{});
    o.opt(a.read_latency_ns);
    o.opt(a.write_latency_ns);
    o.opt(a.read_bandwidth_mbps);
    o.opt(a.write_bandwidth_mbps);
    o.opt(n.memory_tier ? std::optional<std::uint64_t>(*n.memory_tier) : std::nullopt);
    o.u64(n.mem_reserved_bytes);
  }
}
void put(Out& o, const RecTarget& r) {
  o.i32(r.info.pid);
  o.str(r.info.comm);
  o.str(r.info.cmdline);
  o.str(r.info.exe);
  o.str(r.info.cgroup);
  o.ranges(r.vmas);
  o.u32(r.threads);
}
void put(Out& o, const RecTargets& r) {
  o.u32(static_cast<std::uint32_t>(r.pids.size()));
  for (Pid p : r.pids) o.i32(p);
}
void put(Out& o, const RecBatch& r) {
  o.u32(r.source);
  o.u32(static_cast<std::uint32_t>(r.batch.samples.size()));
  for (const auto& s : r.batch.samples) {
    o.i32(s.pid);
    o.u64(s.addr);
    o.u64(s.time);
    o.u64(s.first_time);
    o.u32(s.weight);
    o.u8(static_cast<std::uint8_t>(s.source));
  }
  o.u32(static_cast<std::uint32_t>(r.batch.regions.size()));
  for (const auto& g : r.batch.regions) {
    o.i32(g.pid);
    o.range(g.range);
    o.u32(g.nr_accesses);
    o.u32(g.max_nr_accesses);
    o.u32(g.age);
    o.u64(g.time);
    o.u8(static_cast<std::uint8_t>(g.source));
  }
}
void put(Out& o, const RecResidency& r) {
  o.i32(r.pid);
  o.u8(r.full ? 1 : 0);
  o.u32(static_cast<std::uint32_t>(r.runs.size()));
  for (const auto& run : r.runs) {
    o.range(run.range);
    o.i32(run.node);
  }
  o.u32(static_cast<std::uint32_t>(r.huge_blocks.size()));
  for (auto b : r.huge_blocks) o.u64(b);
}
void put(Out& o, const RecPlan& r) {
  o.u64(r.plan.demote_bytes);
  o.u64(r.plan.promote_bytes);
  o.u32(static_cast<std::uint32_t>(r.plan.moves.size()));
  for (const auto& m : r.plan.moves) {
    o.i32(m.pid);
    o.range(m.range);
    o.i32(m.from_node);
    o.i32(m.to_node);
    o.u8(static_cast<std::uint8_t>(m.reason));
    o.f64(m.heat);
  }
}
void put(Out& o, const RecMove& r) {
  o.i32(r.pid);
  o.i32(r.to_node);
  o.u8(r.demotion ? 1 : 0);
  o.ranges(r.ranges);
  put_stats(o, r.stats);
}
// The sparse form (type 11) lists the blocks read only: (u32 block, u64 bytes) each.
bool sparse(const RecAccesses& r) {
  const auto read = static_cast<std::size_t>(
      std::ranges::count_if(r.bytes_read, [](std::uint64_t b) { return b > 0; }));
  return 4 + 12 * read < 8 * r.bytes_read.size();
}
void put(Out& o, const RecAccesses& r) {
  o.i32(r.pid);
  o.u64(r.begin);
  o.u64(r.end);
  o.u64(r.base);
  o.u64(r.block_bytes);
  o.u32(static_cast<std::uint32_t>(r.bytes_read.size()));
  if (!sparse(r)) {
    for (auto b : r.bytes_read) o.u64(b);
    return;
  }
  const auto read = static_cast<std::uint32_t>(
      std::ranges::count_if(r.bytes_read, [](std::uint64_t b) { return b > 0; }));
  o.u32(read);
  for (std::size_t i = 0; i < r.bytes_read.size(); ++i) {
    if (r.bytes_read[i] == 0) continue;
    o.u32(static_cast<std::uint32_t>(i));
    o.u64(r.bytes_read[i]);
  }
}

// A pool of more blocks than this in a sparse record is refused (it would be allocated whole).
constexpr std::uint32_t kMaxSparseBlocks = 1U << 26;

RecTopology get_topology(In& in, std::uint32_t version) {
  RecTopology r;
  const std::uint32_t n = in.count(4);
  for (std::uint32_t i = 0; i < n && in.ok(); ++i) {
    policy::NumaNode node{.id = in.i32()};
    const std::uint32_t c = in.count(4);
    for (std::uint32_t k = 0; k < c; ++k) node.cpus.push_back(in.i32());
    node.mem_total_bytes = in.u64();
    node.mem_free_bytes = in.u64();
    const std::uint32_t d = in.count(8);
    for (std::uint32_t k = 0; k < d; ++k) {
      const int to = in.i32();
      node.distance[to] = in.i32();
    }
    const bool has_access = in.u8() != 0;
    policy::AccessAttrs a{.read_latency_ns = in.opt(),
                          .write_latency_ns = in.opt(),
                          .read_bandwidth_mbps = in.opt(),
                          .write_bandwidth_mbps = in.opt()};
    if (has_access) node.access = a;
    if (auto tier = in.opt()) node.memory_tier = static_cast<int>(*tier);
    if (version >= 2) node.mem_reserved_bytes = in.u64();
    r.topology.nodes.push_back(std::move(node));
  }
  return r;
}

RecBatch get_batch(In& in) {
  RecBatch r{.source = in.u32()};
  const std::uint32_t n = in.count(33);
  r.batch.samples.resize(n);
  for (auto& s : r.batch.samples) {
    s.pid = in.i32();
    s.addr = in.u64();
    s.time = in.u64();
    s.first_time = in.u64();
    s.weight = in.u32();
    s.source = static_cast<SourceKind>(in.u8());
  }
  const std::uint32_t m = in.count(41);
  r.batch.regions.resize(m);
  for (auto& g : r.batch.regions) {
    g.pid = in.i32();
    g.range = in.range();
    g.nr_accesses = in.u32();
    g.max_nr_accesses = in.u32();
    g.age = in.u32();
    g.time = in.u64();
    g.source = static_cast<SourceKind>(in.u8());
  }
  return r;
}

RecAccesses get_accesses(RecordType t, In& in) {
  RecAccesses r{.pid = in.i32(), .begin = in.u64(), .end = in.u64()};
  r.base = in.u64();
  r.block_bytes = in.u64();
  if (t == RecordType::kAccesses) {
    r.bytes_read.resize(in.count(8));
    for (auto& b : r.bytes_read) b = in.u64();
    return r;
  }
  const std::uint32_t blocks = in.u32();
  if (blocks > kMaxSparseBlocks) {
    in.fail();
    return r;
  }
  r.bytes_read.resize(blocks);
  const std::uint32_t n = in.count(12);
  for (std::uint32_t i = 0; i < n && in.ok(); ++i) {
    const std::uint32_t b = in.u32();
    const std::uint64_t v = in.u64();
    if (b >= blocks) {
      in.fail();
      break;
    }
    r.bytes_read[b] = v;
  }
  return r;
}

std::optional<Record> get(RecordType t, In& in, std::uint32_t version) {
  switch (t) {
    case RecordType::kStart: {
      RecStart r{.now = in.u64()};
      const std::uint32_t n = in.count(1);
      for (std::uint32_t i = 0; i < n; ++i) r.sources.push_back(static_cast<SourceKind>(in.u8()));
      r.mover = in.u8() != 0;
      r.mover_name = in.str();
      return r;
    }
    case RecordType::kStep: {
      RecStep r{.now = in.u64()};
      r.kind = static_cast<StepKind>(in.u8());
      r.paused = in.u8() != 0;
      return r;
    }
    case RecordType::kTopology:
      return get_topology(in, version);
    case RecordType::kTarget: {
      RecTarget r;
      r.info.pid = in.i32();
      r.info.comm = in.str();
      r.info.cmdline = in.str();
      r.info.exe = in.str();
      r.info.cgroup = in.str();
      r.vmas = in.ranges();
      if (version >= 3) r.threads = in.u32();
      return r;
    }
    case RecordType::kTargets: {
      RecTargets r;
      const std::uint32_t n = in.count(4);
      for (std::uint32_t i = 0; i < n; ++i) r.pids.push_back(in.i32());
      return r;
    }
    case RecordType::kBatch:
      return get_batch(in);
    case RecordType::kResidency: {
      RecResidency r{.pid = in.i32()};
      r.full = in.u8() != 0;
      r.runs.resize(in.count(20));
      for (auto& run : r.runs) {
        run.range = in.range();
        run.node = in.i32();
      }
      r.huge_blocks.resize(in.count(8));
      for (auto& b : r.huge_blocks) b = in.u64();
      return r;
    }
    case RecordType::kPlan: {
      RecPlan r;
      r.plan.demote_bytes = in.u64();
      r.plan.promote_bytes = in.u64();
      r.plan.moves.resize(in.count(37));
      for (auto& m : r.plan.moves) {
        m.pid = in.i32();
        m.range = in.range();
        m.from_node = in.i32();
        m.to_node = in.i32();
        m.reason = static_cast<MoveReason>(in.u8());
        m.heat = in.f64();
      }
      return r;
    }
    case RecordType::kMove: {
      RecMove r{.pid = in.i32(), .to_node = in.i32()};
      r.demotion = in.u8() != 0;
      r.ranges = in.ranges();
      r.stats = get_stats(in);
      return r;
    }
    case RecordType::kAccesses:
    case RecordType::kAccessesSparse:
      return get_accesses(t, in);
  }
  return std::nullopt;
}

constexpr std::size_t kHeaderBytes = 16;  // magic, version, reserved
constexpr std::size_t kFrameBytes = 5;    // type, payload length

std::uint64_t thread_cpu_ns() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<std::uint64_t>(ts.tv_sec) * 1'000'000'000ULL +
         static_cast<std::uint64_t>(ts.tv_nsec);
}

}  // namespace

RecordType type_of(const Record& r) {
  if (const auto* a = std::get_if<RecAccesses>(&r); a != nullptr && sparse(*a)) {
    return RecordType::kAccessesSparse;
  }
  return static_cast<RecordType>(r.index() + 1);
}

std::vector<std::uint8_t> encode(const Record& r) {
  Out o;
  std::visit([&o](const auto& rec) { put(o, rec); }, r);
  return std::move(o.bytes);
}

Result<Recording> parse_recording(std::span<const std::uint8_t> bytes, const std::string& what) {
  if (bytes.size() < kHeaderBytes || std::memcmp(bytes.data(), kRecordingMagic, 8) != 0) {
    return fail(fmt::format("{}: not a kvtier recording (no KVTREC header)", what));
  }
  std::uint32_t version = 0;
  std::memcpy(&version, bytes.data() + 8, sizeof version);
  if (version < kOldestRecordingVersion || version > kRecordingVersion) {
    return fail(
        fmt::format("{}: recording format version {}, this kvtierctl reads versions {} to {}", what,
                    version, kOldestRecordingVersion, kRecordingVersion));
  }
  Recording out;
  std::size_t pos = kHeaderBytes;
  while (pos < bytes.size()) {
    if (bytes.size() - pos < kFrameBytes) {
      out.note = fmt::format("{}: the last record is cut short at byte {} (dropped)", what, pos);
      break;
    }
    const auto type = static_cast<RecordType>(bytes[pos]);
    std::uint32_t len = 0;
    std::memcpy(&len, bytes.data() + pos + 1, sizeof len);
    if (len > bytes.size() - pos - kFrameBytes) {
      out.note = fmt::format("{}: the last record is cut short at byte {} (dropped)", what, pos);
      break;
    }
    In in(bytes.subspan(pos + kFrameBytes, len));
    auto rec = get(type, in, version);
    if (!rec) {
      // A record type from a newer writer: skipped, its length says how far.
      pos += kFrameBytes + len;
      continue;
    }
    if (!in.ok() || !in.done()) {
      return fail(fmt::format("{}: malformed record (type {}) at byte {}", what,
                              static_cast<int>(type), pos));
    }
    out.records.push_back(std::move(*rec));
    pos += kFrameBytes + len;
  }
  return out;
}

Result<Recording> read_recording(const std::filesystem::path& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) {
    return fail(fmt::format("{}: cannot read: {}", path.string(), errno_text(errno)), errno);
  }
  const std::vector<std::uint8_t> bytes((std::istreambuf_iterator<char>(f)),
                                        std::istreambuf_iterator<char>());
  return parse_recording(bytes, path.string());
}

Result<std::unique_ptr<RecordingWriter>> RecordingWriter::create(const std::filesystem::path& path,
                                                                 RecordingLimits limits,
                                                                 TimeNs now) {
  if (!path.is_absolute()) {
    return fail(fmt::format("{}: the recording's path must be absolute", path.string()), EINVAL);
  }
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0640);
  if (fd < 0) {
    const int e = errno;
    return fail(fmt::format("{}: cannot create: {}{}", path.string(), errno_text(e),
                            e == EEXIST ? " (a recording never overwrites a file)" : ""),
                e);
  }
  std::FILE* file = ::fdopen(fd, "wb");
  if (file == nullptr) {
    const int e = errno;
    ::close(fd);
    return fail(fmt::format("{}: {}", path.string(), errno_text(e)), e);
  }
  std::uint8_t header[kHeaderBytes] = {};
  std::memcpy(header, kRecordingMagic, 8);
  std::memcpy(header + 8, &kRecordingVersion, sizeof kRecordingVersion);
  if (std::fwrite(header, 1, sizeof header, file) != sizeof header) {
    const int e = errno;
    std::fclose(file);
    return fail(fmt::format("{}: cannot write: {}", path.string(), errno_text(e)), e);
  }
  return std::unique_ptr<RecordingWriter>(new RecordingWriter(path, file, limits, now));
}

RecordingWriter::RecordingWriter(std::filesystem::path path, std::FILE* file,
                                 RecordingLimits limits, TimeNs now)
    : path_(std::move(path)), file_(file), limits_(limits), started_(now), bytes_(kHeaderBytes) {}

RecordingWriter::~RecordingWriter() {
  close("stopped");
}

bool RecordingWriter::write(const Record& r, TimeNs now) {
  if (file_ == nullptr) return false;
  const std::uint64_t cpu0 = thread_cpu_ns();
  if (now >= started_ + limits_.max_duration) {
    close(fmt::format("max-seconds ({} s) reached", limits_.max_duration / 1'000'000'000));
    return false;
  }
  const std::vector<std::uint8_t> payload = encode(r);
  if (bytes_ + kFrameBytes + payload.size() > limits_.max_bytes) {
    close(fmt::format("max-bytes ({}) reached", limits_.max_bytes));
    return false;
  }
  std::uint8_t frame[kFrameBytes];
  frame[0] = static_cast<std::uint8_t>(type_of(r));
  const auto len = static_cast<std::uint32_t>(payload.size());
  std::memcpy(frame + 1, &len, sizeof len);
  if (std::fwrite(frame, 1, kFrameBytes, file_) != kFrameBytes ||
      std::fwrite(payload.data(), 1, payload.size(), file_) != payload.size()) {
    close(fmt::format("write error: {}", errno_text(errno)));
    return false;
  }
  bytes_ += kFrameBytes + payload.size();
  ++records_;
  cpu_ns_ += thread_cpu_ns() - cpu0;
  return true;
}

void RecordingWriter::flush() {
  if (file_ == nullptr) return;
  const std::uint64_t cpu0 = thread_cpu_ns();
  if (std::fflush(file_) != 0) close(fmt::format("write error: {}", errno_text(errno)));
  cpu_ns_ += thread_cpu_ns() - cpu0;
}

void RecordingWriter::close(const std::string& why) {
  if (file_ == nullptr) return;
  std::fclose(file_);
  file_ = nullptr;
  stopped_because_ = why;
}

}  // namespace kvtier::agent
