#include "bench/kvsim/kv_pool.hpp"

#include <fmt/format.h>
#include <sys/mman.h>
#include <cerrno>
#include <utility>

namespace kvtier::bench {

Result<KvPool> KvPool::create(const PoolLayout& layout, const PoolOptions& options) {
  const std::uint64_t bytes = layout.total_bytes();
  if (bytes == 0) return fail("KV pool: empty layout (no blocks or no layers)");
  const auto length = static_cast<std::size_t>(bytes);
  const int flags = MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE;
  void* p = mmap(nullptr, length, PROT_READ | PROT_WRITE, flags, -1, 0);
  if (p == MAP_FAILED) {
    const int err = errno;
    return fail(fmt::format("KV pool: mmap of {} bytes failed: {}; lower --kv-budget", bytes,
                            errno_text(err)),
                err);
  }
  KvPool pool(static_cast<std::byte*>(p), length, layout);
  if (options.hugepages && madvise(p, length, MADV_HUGEPAGE) != 0) {
    const int err = errno;
    return fail(fmt::format("KV pool: madvise(MADV_HUGEPAGE) failed: {}; THP may be disabled "
                            "(/sys/kernel/mm/transparent_hugepage/enabled), drop --hugepages",
                            errno_text(err)),
                err);
  }
  if (options.no_hugepages && madvise(p, length, MADV_NOHUGEPAGE) != 0) {
    const int err = errno;
    return fail(fmt::format("KV pool: madvise(MADV_NOHUGEPAGE) failed: {}; drop --no-hugepages",
                            errno_text(err)),
                err);
  }
  if (options.populate) {
    // MADV_POPULATE_WRITE (5.14+) faults every page in without touching it from user space;
    // fall back to writing one byte a page where the kernel lacks it.
#ifdef MADV_POPULATE_WRITE
    if (madvise(p, length, MADV_POPULATE_WRITE) == 0) return pool;
#endif
    for (std::size_t off = 0; off < length; off += 4096) pool.base_[off] = std::byte{0};
  }
  return pool;
}

KvPool::KvPool(KvPool&& other) noexcept
    : base_(std::exchange(other.base_, nullptr)),
      length_(std::exchange(other.length_, 0)),
      layout_(other.layout_) {}

KvPool& KvPool::operator=(KvPool&& other) noexcept {
  if (this != &other) {
    if (base_ != nullptr) munmap(base_, length_);
    base_ = std::exchange(other.base_, nullptr);
    length_ = std::exchange(other.length_, 0);
    layout_ = other.layout_;
  }
  return *this;
}

KvPool::~KvPool() {
  if (base_ != nullptr) munmap(base_, length_);
}

AddrRange KvPool::range() const {
  const auto start = reinterpret_cast<std::uintptr_t>(base_);
  return AddrRange{.start = start, .end = start + length_};
}

}  // namespace kvtier::bench
