#include "bench/kvsim/live_truth.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <utility>

namespace kvtier::bench {

namespace {

std::size_t file_bytes(const LiveTruthHeader& h) {
  return h.header_bytes + std::size_t{h.blocks} * sizeof(std::uint64_t);
}

struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) close(fd);
  }
};

}  // namespace

Result<LiveTruthWriter> LiveTruthWriter::create(const std::filesystem::path& path,
                                                const LiveTruthHeader& h) {
  LiveTruthHeader head = h;
  head.magic = kLiveTruthMagic;
  head.version = kLiveTruthVersion;
  head.header_bytes = sizeof(LiveTruthHeader);
  head.ready = 0;
  if (head.blocks == 0) return fail(fmt::format("{}: live truth for 0 blocks", path.string()));
  // A fresh file, not one a reader may still map: unlink first, then create it exclusively.
  unlink(path.c_str());
  Fd f{.fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644)};
  if (f.fd < 0) {
    const int err = errno;
    return fail(
        fmt::format("{}: cannot create the live truth file: {}", path.string(), errno_text(err)),
        err);
  }
  const std::size_t length = file_bytes(head);
  if (ftruncate(f.fd, static_cast<off_t>(length)) != 0) {
    const int err = errno;
    return fail(fmt::format("{}: cannot size the live truth file to {} bytes: {}", path.string(),
                            length, errno_text(err)),
                err);
  }
  void* map = mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_SHARED, f.fd, 0);
  if (map == MAP_FAILED) {
    const int err = errno;
    return fail(
        fmt::format("{}: cannot map the live truth file: {}", path.string(), errno_text(err)), err);
  }
  auto* base = static_cast<std::byte*>(map);
  std::memcpy(base, &head, sizeof head);
  // The mapping is page-aligned and header_bytes a multiple of 8: the times are aligned words.
  auto* times = reinterpret_cast<std::uint64_t*>(base + head.header_bytes);
  for (std::uint32_t b = 0; b < head.blocks; ++b) times[b] = head.created_ns;
  auto* ready = reinterpret_cast<std::uint64_t*>(base + offsetof(LiveTruthHeader, ready));
  std::atomic_ref<std::uint64_t>(*ready).store(1, std::memory_order_release);
  return LiveTruthWriter(map, length, std::span<std::uint64_t>(times, head.blocks));
}

LiveTruthWriter::LiveTruthWriter(LiveTruthWriter&& other) noexcept
    : map_(std::exchange(other.map_, nullptr)),
      length_(std::exchange(other.length_, 0)),
      times_(std::exchange(other.times_, {})) {}

LiveTruthWriter& LiveTruthWriter::operator=(LiveTruthWriter&& other) noexcept {
  if (this != &other) {
    if (map_ != nullptr) munmap(map_, length_);
    map_ = std::exchange(other.map_, nullptr);
    length_ = std::exchange(other.length_, 0);
    times_ = std::exchange(other.times_, {});
  }
  return *this;
}

LiveTruthWriter::~LiveTruthWriter() {
  if (map_ != nullptr) munmap(map_, length_);
}

Result<LiveTruthReader> LiveTruthReader::open(const std::filesystem::path& path) {
  Fd f{.fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC)};
  if (f.fd < 0) {
    const int err = errno;
    return fail(
        fmt::format("{}: cannot open the live truth file: {}", path.string(), errno_text(err)),
        err);
  }
  struct stat st {};
  if (fstat(f.fd, &st) != 0) {
    const int err = errno;
    return fail(fmt::format("{}: fstat: {}", path.string(), errno_text(err)), err);
  }
  const auto size = static_cast<std::size_t>(st.st_size);
  if (size < sizeof(LiveTruthHeader)) {
    return fail(
        fmt::format("{}: {} bytes, too short for a kvsim live truth header ({} bytes); "
                    "is it kvsim's --live-truth file?",
                    path.string(), size, sizeof(LiveTruthHeader)));
  }
  const void* map = mmap(nullptr, size, PROT_READ, MAP_SHARED, f.fd, 0);
  if (map == MAP_FAILED) {
    const int err = errno;
    return fail(
        fmt::format("{}: cannot map the live truth file: {}", path.string(), errno_text(err)), err);
  }
  LiveTruthReader r(map, size, LiveTruthHeader{});
  const auto* base = static_cast<const std::byte*>(map);
  // The GCC builtin, unlike std::atomic_ref before C++26, loads through a const pointer.
  const auto* ready =
      reinterpret_cast<const std::uint64_t*>(base + offsetof(LiveTruthHeader, ready));
  if (__atomic_load_n(ready, __ATOMIC_ACQUIRE) != 1) {
    return fail(fmt::format("{}: the live truth is not ready yet (kvsim is still writing it)",
                            path.string()),
                EAGAIN);
  }
  std::memcpy(&r.header_, base, sizeof r.header_);
  const LiveTruthHeader& h = r.header_;
  if (h.magic != kLiveTruthMagic || h.version != kLiveTruthVersion ||
      h.header_bytes != sizeof(LiveTruthHeader)) {
    return fail(
        fmt::format("{}: not a kvsim live truth file of version {} (magic {:#x}, version "
                    "{}, header {} bytes)",
                    path.string(), kLiveTruthVersion, h.magic, h.version, h.header_bytes));
  }
  if (size < file_bytes(h) || h.pool_end <= h.pool_start || h.tensors == 0 ||
      h.tensor_bytes != std::uint64_t{h.blocks} * h.chunk_bytes ||
      h.pool_start + h.tensor_bytes * h.tensors != h.pool_end) {
    return fail(fmt::format(
        "{}: inconsistent live truth header ({} bytes for {} blocks, pool "
        "[{:#x}, {:#x}), {} tensors of {} bytes)",
        path.string(), size, h.blocks, h.pool_start, h.pool_end, h.tensors, h.tensor_bytes));
  }
  return r;
}

LiveTruthReader::LiveTruthReader(LiveTruthReader&& other) noexcept
    : map_(std::exchange(other.map_, nullptr)),
      length_(std::exchange(other.length_, 0)),
      header_(other.header_) {}

LiveTruthReader& LiveTruthReader::operator=(LiveTruthReader&& other) noexcept {
  if (this != &other) {
    if (map_ != nullptr) munmap(const_cast<void*>(map_), length_);
    map_ = std::exchange(other.map_, nullptr);
    length_ = std::exchange(other.length_, 0);
    header_ = other.header_;
  }
  return *this;
}

LiveTruthReader::~LiveTruthReader() {
  if (map_ != nullptr) munmap(const_cast<void*>(map_), length_);
}

void LiveTruthReader::read(std::vector<TimeNs>& out) const {
  out.resize(header_.blocks);
  const auto* base = static_cast<const std::byte*>(map_);
  const auto* times = reinterpret_cast<const std::uint64_t*>(base + header_.header_bytes);
  for (std::uint32_t b = 0; b < header_.blocks; ++b) {
    out[b] = __atomic_load_n(&times[b], __ATOMIC_RELAXED);
  }
}

}  // namespace kvtier::bench
