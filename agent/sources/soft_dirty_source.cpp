#include "agent/sources/soft_dirty_source.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "agent/host/availability.hpp"
#include "agent/host/host_paths.hpp"
#include "agent/host/procfs.hpp"
#include "agent/host/sysfs.hpp"
#include "agent/host/unique_fd.hpp"
#include "agent/sources/hotness_source.hpp"
#include "agent/sources/page_scan.hpp"
#include "policy/error.hpp"
#include "policy/types.hpp"
#include "policy/units.hpp"

namespace kvtier::agent {

namespace {

constexpr std::uint64_t kPresent = 1ULL << 63;
constexpr std::uint64_t kSoftDirtyBit = 1ULL << 55;
// pagemap entries read per pread (512 KiB).
constexpr std::uint64_t kChunkEntries = 1ULL << 16;

Result<std::uint64_t> pagemap_entry(int fd, std::uint64_t vpage, const std::string& what) {
  std::uint64_t e = 0;
  const auto off = static_cast<off_t>(vpage * sizeof(e));
  if (pread(fd, &e, sizeof(e), off) != static_cast<ssize_t>(sizeof(e))) {
    const int err = errno;
    return fail(fmt::format("{}: read at {}: {}", what, off, errno_text(err)), err);
  }
  return e;
}

}  // namespace

SoftDirtySource::SoftDirtySource(HostPaths paths, SoftDirtyOptions opts)
    : paths_(std::move(paths)), opts_(opts) {}

// Whether the kernel keeps soft-dirty bits, tried on a page of our own: clear,
// write, and the bit must be set; clear again, and it must be gone.
Availability SoftDirtySource::probe() const {
  const auto clear_refs = paths_.proc / "self/clear_refs";
  const auto pagemap_path = (paths_.proc / "self/pagemap").string();
  void* mem = mmap(nullptr, kPageSize, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (mem == MAP_FAILED) return unavailable(fmt::format("mmap: {}", errno_text(errno)));
  auto* page = static_cast<volatile unsigned char*>(mem);
  const auto vpage = reinterpret_cast<std::uintptr_t>(mem) / kPageSize;
  Availability result = available("ok: soft-dirty bits in /proc/PID/pagemap");
  auto bit_after = [&](bool write) -> Result<bool> {
    if (auto ok = write_text(clear_refs, "4"); !ok) return std::unexpected(ok.error());
    if (write) page[0] = static_cast<unsigned char>(page[0] + 1);
    const UniqueFd fd(::open(pagemap_path.c_str(), O_RDONLY | O_CLOEXEC));
    if (fd.get() < 0) {
      const int err = errno;
      return fail(fmt::format("{}: {}", pagemap_path, errno_text(err)), err);
    }
    auto e = pagemap_entry(fd.get(), vpage, pagemap_path);
    if (!e) return std::unexpected(e.error());
    return (*e & kSoftDirtyBit) != 0;
  };
  page[0] = 1;
  auto written = bit_after(true);
  auto clean = written ? bit_after(false) : written;
  if (!written || !clean) {
    result = unavailable((written ? clean : written).error().message);
  } else if (!*written || *clean) {
    result = unavailable(
        "no soft-dirty tracking: a written page's bit in /proc/self/pagemap did not follow "
        "clear_refs (CONFIG_MEM_SOFT_DIRTY)");
  }
  munmap(mem, kPageSize);
  return result;
}

Result<void> SoftDirtySource::start() {
  started_ = true;
  return {};
}

Result<void> SoftDirtySource::set_targets(std::span<const Pid> pids) {
  targets_.assign(pids.begin(), pids.end());
  std::ranges::sort(targets_);
  auto gone = [this](const auto& kv) { return !std::ranges::binary_search(targets_, kv.first); };
  std::erase_if(cleared_, gone);
  std::erase_if(ranges_, gone);
  return {};
}

Result<void> SoftDirtySource::set_ranges(std::span<const TargetRanges> targets) {
  ranges_.clear();
  for (const auto& t : targets) ranges_[t.pid] = t.ranges;
  return {};
}

Result<void> SoftDirtySource::scan(Pid pid, TimeNs now, SourceBatch& out, std::uint64_t& budget) {
  const auto dir = paths_.proc / std::to_string(pid);
  const auto last = cleared_.find(pid);
  if (last != cleared_.end()) {
    std::vector<AddrRange> anon;  // without tracked ranges from the loop
    std::span<const AddrRange> ranges = anon;
    if (auto it = ranges_.find(pid); it != ranges_.end()) {
      ranges = it->second;
    } else {
      auto maps = read_maps(paths_, pid);
      if (!maps) return std::unexpected(maps.error());
      for (const MapEntry& m : *maps) {
        if (is_movable_anon(m)) anon.push_back(m.range);
      }
      ranges = anon;
    }
    const std::string pagemap_path = (dir / "pagemap").string();
    const UniqueFd pagemap(::open(pagemap_path.c_str(), O_RDONLY | O_CLOEXEC));
    if (pagemap.get() < 0) {
      const int err = errno;
      return fail(fmt::format("{}: {}", pagemap_path, errno_text(err)), err);
    }
    std::vector<std::uint64_t> entries;
    for (const AddrRange& r : ranges) {
      std::uint64_t vpage = r.start / kPageSize;
      const std::uint64_t end = (r.end + kPageSize - 1) / kPageSize;
      while (vpage < end && budget > 0) {
        const std::uint64_t count = std::min({end - vpage, kChunkEntries, budget});
        entries.resize(count);
        const ssize_t n = pread(pagemap.get(), entries.data(), count * sizeof(std::uint64_t),
                                static_cast<off_t>(vpage * sizeof(std::uint64_t)));
        if (n < 0) {
          const int err = errno;
          return fail(fmt::format("{}: {}", pagemap_path, errno_text(err)), err);
        }
        const auto got = static_cast<std::uint64_t>(n) / sizeof(std::uint64_t);
        for (std::uint64_t i = 0; i < got; ++i) {
          if ((entries[i] & (kPresent | kSoftDirtyBit)) != (kPresent | kSoftDirtyBit)) continue;
          // Written at some time since the last clear: the sample stands for
          // that window, so a promotion's latency counts from its start.
          out.samples.push_back(AccessSample{.pid = pid,
                                             .addr = (vpage + i) * kPageSize,
                                             .time = now,
                                             .first_time = last->second,
                                             .weight = 1,
                                             .source = SourceKind::kSoftDirty});
        }
        budget -= count;
        if (got < count) break;  // past the end of the address space
        vpage += count;
      }
    }
  }
  if (auto ok = write_text(dir / "clear_refs", "4"); !ok) {
    if (ok.error().code != EACCES && ok.error().code != EPERM) return ok;
    return fail(fmt::format("{} (writing another user's clear_refs needs CAP_DAC_OVERRIDE)",
                            ok.error().message),
                ok.error().code);
  }
  cleared_[pid] = now;
  return {};
}

Result<void> SoftDirtySource::collect(TimeNs now, SourceBatch& out) {
  if (!started_) return fail("dirty: collect() before start()");
  if (next_scan_ && now < *next_scan_) return {};
  const TimeNs cpu0 = opts_.cpu_clock();
  auto ok = scan_targets(targets_, opts_.max_pages_per_scan, [&](Pid pid, std::uint64_t& budget) {
    return scan(pid, now, out, budget);
  });
  const TimeNs cost = opts_.cpu_clock() - cpu0;
  const auto paced = static_cast<TimeNs>(static_cast<double>(cost) / opts_.max_cpu_share);
  next_scan_ = now + std::max(opts_.scan_interval, paced);
  if (paced > opts_.scan_interval) {
    spdlog::debug("dirty: a scan took {} of CPU: the next one in {}", policy::format_duration(cost),
                  policy::format_duration(paced));
  }
  return ok;
}

void SoftDirtySource::stop() {
  started_ = false;
  cleared_.clear();
  next_scan_.reset();
}

}  // namespace kvtier::agent
