#include "agent/sources/idle_page_source.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "agent/host/availability.hpp"
#include "agent/host/host_paths.hpp"
#include "agent/host/procfs.hpp"
#include "agent/host/unique_fd.hpp"
#include "agent/sources/hotness_source.hpp"
#include "agent/sources/page_scan.hpp"
#include "agent/sources/probes.hpp"
#include "policy/error.hpp"
#include "policy/types.hpp"

namespace kvtier::agent {

namespace {

constexpr std::uint64_t kPresent = 1ULL << 63;
constexpr std::uint64_t kPfnMask = (1ULL << 55) - 1;

Result<std::uint64_t> read_word(int fd, std::uint64_t index, const std::string& what) {
  std::uint64_t w = 0;
  const auto off = static_cast<off_t>(index * sizeof(w));
  const ssize_t n = pread(fd, &w, sizeof(w), off);
  if (n != static_cast<ssize_t>(sizeof(w))) {
    const int err = n < 0 ? errno : EIO;
    return fail(fmt::format("{}: read at {}: {}", what, off, errno_text(err)), err);
  }
  return w;
}

}  // namespace

IdlePageSource::IdlePageSource(HostPaths paths, IdlePageOptions opts)
    : paths_(std::move(paths)), opts_(opts) {}

Availability IdlePageSource::probe() const {
  if (auto a = probe_page_idle(paths_); !a.ok) return a;
  // PFNs in pagemap are zero without CAP_SYS_ADMIN: look at a page of ours.
  static volatile std::uint64_t probe_word = 1;
  probe_word = probe_word + 1;
  const auto addr = reinterpret_cast<std::uintptr_t>(&probe_word);
  const auto path = (paths_.proc / "self/pagemap").string();
  const UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) return unavailable(fmt::format("{}: {}", path, errno_text(errno)));
  auto e = read_word(fd.get(), addr / kPageSize, path);
  if (!e) return unavailable(e.error().message);
  if ((*e & kPresent) == 0 || (*e & kPfnMask) == 0) {
    return unavailable(fmt::format("{} shows no PFNs (needs CAP_SYS_ADMIN)", path));
  }
  return available("ok: page_idle bitmap with /proc/PID/pagemap");
}

Result<void> IdlePageSource::start() {
  started_ = true;
  return {};
}

Result<void> IdlePageSource::set_targets(std::span<const Pid> pids) {
  targets_.assign(pids.begin(), pids.end());
  std::ranges::sort(targets_);
  std::erase_if(marked_,
                [this](const auto& kv) { return !std::ranges::binary_search(targets_, kv.first); });
  return {};
}

Result<void> IdlePageSource::scan(Pid pid, TimeNs now, SourceBatch& out, std::uint64_t& budget) {
  const auto dir = paths_.proc / std::to_string(pid);
  auto maps = read_maps(paths_, pid);
  if (!maps) return std::unexpected(maps.error());
  const std::string pagemap_path = (dir / "pagemap").string();
  const UniqueFd pagemap(::open(pagemap_path.c_str(), O_RDONLY | O_CLOEXEC));
  if (pagemap.get() < 0) {
    const int err = errno;
    return fail(fmt::format("{}: {}", pagemap_path, errno_text(err)), err);
  }
  const std::string bitmap_path = (paths_.sys / "kernel/mm/page_idle/bitmap").string();
  const UniqueFd bitmap(::open(bitmap_path.c_str(), O_RDWR | O_CLOEXEC));
  if (bitmap.get() < 0) {
    const int err = errno;
    return fail(fmt::format("{}: {}", bitmap_path, errno_text(err)), err);
  }

  auto& previous = marked_[pid];
  std::map<std::uint64_t, std::uint64_t> now_marked;
  std::map<std::uint64_t, std::uint64_t> idle_words;  // bitmap word -> bits read
  std::map<std::uint64_t, std::uint64_t> to_mark;     // bitmap word -> bits to set
  std::vector<std::uint64_t> entries;
  for (const MapEntry& m : *maps) {
    if (!is_movable_anon(m)) continue;
    const AddrRange& r = m.range;
    const std::uint64_t first = r.start / kPageSize;
    const std::uint64_t count = std::min(r.bytes() / kPageSize, budget);
    if (count == 0) break;
    budget -= count;
    entries.resize(count);
    const auto bytes = static_cast<std::size_t>(count * sizeof(std::uint64_t));
    const ssize_t n = pread(pagemap.get(), entries.data(), bytes,
                            static_cast<off_t>(first * sizeof(std::uint64_t)));
    if (n < 0) {
      const int err = errno;
      return fail(fmt::format("{}: {}", pagemap_path, errno_text(err)), err);
    }
    const auto got = static_cast<std::uint64_t>(n) / sizeof(std::uint64_t);
    for (std::uint64_t i = 0; i < got; ++i) {
      if ((entries[i] & kPresent) == 0) continue;
      const std::uint64_t pfn = entries[i] & kPfnMask;
      if (pfn == 0) continue;
      const std::uint64_t vpage = first + i;
      const std::uint64_t word = pfn / 64;
      const std::uint64_t bit = 1ULL << (pfn % 64);
      auto prev = previous.find(vpage);
      if (prev != previous.end() && prev->second == pfn) {
        auto w = idle_words.find(word);
        if (w == idle_words.end()) {
          auto value = read_word(bitmap.get(), word, bitmap_path);
          if (!value) return std::unexpected(value.error());
          w = idle_words.emplace(word, *value).first;
        }
        // The kernel cleared the idle bit: the page was accessed since.
        if ((w->second & bit) == 0) {
          out.samples.push_back(AccessSample{.pid = pid,
                                             .addr = vpage * kPageSize,
                                             .time = now,
                                             .weight = 1,
                                             .source = SourceKind::kIdlePage});
        }
      }
      now_marked.emplace(vpage, pfn);
      to_mark[word] |= bit;
    }
  }
  for (const auto& [word, bits] : to_mark) {
    const auto off = static_cast<off_t>(word * sizeof(std::uint64_t));
    if (pwrite(bitmap.get(), &bits, sizeof(bits), off) != static_cast<ssize_t>(sizeof(bits))) {
      const int err = errno;
      return fail(fmt::format("{}: write at {}: {}", bitmap_path, off, errno_text(err)), err);
    }
  }
  previous = std::move(now_marked);
  return {};
}

Result<void> IdlePageSource::collect(TimeNs now, SourceBatch& out) {
  if (!started_) return fail("idle: collect() before start()");
  if (last_scan_ && now < *last_scan_ + opts_.scan_interval) return {};
  last_scan_ = now;
  return scan_targets(targets_, opts_.max_pages_per_scan,
                      [&](Pid pid, std::uint64_t& budget) { return scan(pid, now, out, budget); });
}

void IdlePageSource::stop() {
  started_ = false;
  marked_.clear();
}

}  // namespace kvtier::agent
