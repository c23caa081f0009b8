#include "agent/sources/return_watch.hpp"

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "bpf/kvtier_abi.h"
#include "policy/error.hpp"
#include "policy/types.hpp"

namespace kvtier::agent {
namespace {

constexpr std::uint64_t kChunk = std::uint64_t{1} << KVT_RETURN_SHIFT;

}  // namespace

std::uint64_t ReturnWatch::chunk_bytes() {
  return kChunk;
}

Result<std::unique_ptr<BpfReturnWatch>> BpfReturnWatch::create(int map_fd, int ring_fd) {
  std::unique_ptr<BpfReturnWatch> w(new BpfReturnWatch(map_fd, nullptr));
  w->ring_ = ring_buffer__new(ring_fd, &BpfReturnWatch::on_event, w.get(), nullptr);
  if (w->ring_ == nullptr) {
    const int err = errno;
    return fail(fmt::format("faults: return watch: ring_buffer__new: {}", errno_text(err)), err);
  }
  return w;
}

BpfReturnWatch::~BpfReturnWatch() {
  if (ring_ != nullptr) ring_buffer__free(ring_);
}

void BpfReturnWatch::update(Pid pid, std::span<const AddrRange> ranges, bool arm) {
  kvt_return_key key{.tgid = static_cast<__u32>(pid), .chunk = 0};
  const __u8 one = 1;
  std::uint64_t last = ~std::uint64_t{0};
  for (const auto& r : ranges) {
    if (r.end <= r.start) continue;
    for (std::uint64_t c = std::max(r.start / kChunk, last + 1); c <= (r.end - 1) / kChunk; ++c) {
      key.chunk = static_cast<__u32>(c);
      if (arm) {
        if (bpf_map_update_elem(map_fd_, &key, &one, BPF_ANY) == 0) {
          ++stats_.armed;
        } else {
          ++stats_.failed;
        }
      } else if (bpf_map_delete_elem(map_fd_, &key) == 0) {
        ++stats_.disarmed;
      }
      last = c;
    }
  }
}

void BpfReturnWatch::arm(Pid pid, std::span<const AddrRange> ranges) {
  update(pid, ranges, true);
}

void BpfReturnWatch::disarm(Pid pid, std::span<const AddrRange> ranges) {
  update(pid, ranges, false);
}

void BpfReturnWatch::keep_only(std::span<const Pid> pids) const {
  // Collect first: deleting while walking with get_next_key restarts the walk.
  std::vector<kvt_return_key> doomed;
  kvt_return_key key{};
  kvt_return_key next{};
  const void* prev = nullptr;
  while (bpf_map_get_next_key(map_fd_, prev, &next) == 0) {
    if (!std::ranges::binary_search(pids, static_cast<Pid>(next.tgid))) doomed.push_back(next);
    key = next;
    prev = &key;
  }
  for (const auto& k : doomed) bpf_map_delete_elem(map_fd_, &k);
}

int BpfReturnWatch::epoll_fd() const {
  return ring_buffer__epoll_fd(ring_);
}

int BpfReturnWatch::on_event(void* ctx, void* /*data*/, std::size_t size) {
  auto* w = static_cast<BpfReturnWatch*>(ctx);
  if (size >= sizeof(kvt_return_event)) ++w->stats_.returns;
  return 0;
}

Result<std::size_t> BpfReturnWatch::drain() {
  const std::uint64_t before = stats_.returns;
  const int rc = ring_buffer__consume(ring_);
  if (rc < 0 && rc != -EINTR) {
    return fail(fmt::format("faults: return watch: ring buffer: {}", errno_text(-rc)), -rc);
  }
  return stats_.returns - before;
}

}  // namespace kvtier::agent
