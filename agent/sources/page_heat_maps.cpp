#include "agent/sources/page_heat_maps.hpp"

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <utility>
#include <vector>

#include "agent/sources/hotness_source.hpp"
#include "bpf/kvtier_abi.h"
#include "policy/error.hpp"
#include "policy/types.hpp"

namespace kvtier::agent {

Result<std::vector<std::uint64_t>> sum_percpu_u64(int map_fd, std::uint32_t entries) {
  const int ncpu = libbpf_num_possible_cpus();
  if (ncpu <= 0)
    return fail(fmt::format("cannot count possible CPUs: {}", errno_text(-ncpu)), -ncpu);
  std::vector<std::uint64_t> per_cpu(static_cast<std::size_t>(ncpu));
  std::vector<std::uint64_t> sums(entries);
  for (std::uint32_t i = 0; i < entries; ++i) {
    if (bpf_map_lookup_elem(map_fd, &i, per_cpu.data()) != 0) {
      const int err = errno;
      return fail(fmt::format("BPF per-CPU counters: lookup {}: {}", i, errno_text(err)), err);
    }
    for (const auto v : per_cpu) sums[i] += v;
  }
  return sums;
}

Result<void> PageHeatMaps::set_targets(std::span<const Pid> pids) {
  std::vector<Pid> wanted(pids.begin(), pids.end());
  std::ranges::sort(wanted);
  wanted.erase(std::ranges::unique(wanted).begin(), wanted.end());
  for (const Pid pid : targets_) {
    if (std::ranges::binary_search(wanted, pid)) continue;
    const auto key = static_cast<__u32>(pid);
    if (bpf_map_delete_elem(targets_fd_, &key) != 0 && errno != ENOENT) {
      const int err = errno;
      return fail(fmt::format("BPF target map: remove pid {}: {}", pid, errno_text(err)), err);
    }
    if (auto purged = purge(pid); !purged) return std::unexpected(purged.error());
  }
  for (const Pid pid : wanted) {
    const auto key = static_cast<__u32>(pid);
    const __u8 one = 1;
    if (bpf_map_update_elem(targets_fd_, &key, &one, BPF_ANY) != 0) {
      const int err = errno;
      return fail(fmt::format("BPF target map: add pid {}: {} (more than {} targets?)", pid,
                              errno_text(err), KVT_MAX_TARGETS),
                  err);
    }
  }
  targets_ = std::move(wanted);
  return {};
}

Result<std::size_t> PageHeatMaps::purge(Pid pid) const {
  // Collect first: deleting while walking with get_next_key restarts the walk.
  std::vector<kvt_page_key> doomed;
  kvt_page_key key{};
  kvt_page_key next{};
  const void* prev = nullptr;
  while (bpf_map_get_next_key(pages_fd_, prev, &next) == 0) {
    if (next.tgid == static_cast<__u32>(pid)) doomed.push_back(next);
    key = next;
    prev = &key;
  }
  std::size_t n = 0;
  for (const auto& k : doomed) {
    if (bpf_map_delete_elem(pages_fd_, &k) == 0) ++n;
  }
  return n;
}

Result<std::size_t> PageHeatMaps::drain(SourceBatch& out) {
  constexpr std::uint32_t kChunk = 4096;
  std::vector<kvt_page_key> keys(kChunk);
  std::vector<kvt_page_val> vals(kChunk);
  // The batch cursor of a hash map is a bucket index; a key-sized buffer fits it.
  kvt_page_key in_batch{};
  kvt_page_key out_batch{};
  bool first = true;
  std::size_t total = 0;
  for (;;) {
    std::uint32_t count = kChunk;
    const int rc =
        bpf_map_lookup_and_delete_batch(pages_fd_, first ? nullptr : &in_batch, &out_batch,
                                        keys.data(), vals.data(), &count, nullptr);
    const int err = rc != 0 ? errno : 0;
    if (rc != 0 && err != ENOENT) {
      return fail(fmt::format("BPF page map: lookup_and_delete_batch: {}", errno_text(err)), err);
    }
    for (std::uint32_t i = 0; i < count; ++i) {
      const auto weight =
          std::min<std::uint64_t>(vals[i].weight, std::numeric_limits<std::uint32_t>::max());
      out.samples.push_back(AccessSample{.pid = static_cast<Pid>(keys[i].tgid),
                                         .addr = keys[i].page << 12U,
                                         .time = vals[i].last_ns,
                                         .first_time = vals[i].first_ns,
                                         .weight = static_cast<std::uint32_t>(weight),
                                         .source = kind_});
    }
    total += count;
    if (err == ENOENT) break;
    in_batch = out_batch;
    first = false;
  }
  return total;
}

Result<SamplerStats> PageHeatMaps::stats() const {
  auto sums = sum_percpu_u64(stats_fd_, KVT_STAT_NR);
  if (!sums) return std::unexpected(sums.error());
  const auto& s = *sums;
  return SamplerStats{.events = s[KVT_STAT_EVENTS],
                      .matched = s[KVT_STAT_MATCHED],
                      .no_addr = s[KVT_STAT_NO_ADDR],
                      .map_full = s[KVT_STAT_MAP_FULL],
                      .prot_faults = s[KVT_STAT_PROT_FAULT],
                      .returns = s[KVT_STAT_RETURNS],
                      .return_lost = s[KVT_STAT_RETURN_LOST]};
}

}  // namespace kvtier::agent
