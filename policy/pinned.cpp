#include "policy/pinned.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <span>
#include <string>
#include <vector>

#include "policy/types.hpp"
#include "policy/units.hpp"

namespace kvtier::policy {

bool overlaps_any(std::span<const AddrRange> sorted, AddrRange r) {
  if (sorted.empty()) return false;
  auto it = std::ranges::upper_bound(sorted, r.start, {}, &AddrRange::start);
  if (it != sorted.end() && it->start < r.end) return true;
  return it != sorted.begin() && std::prev(it)->end > r.start;
}

namespace {

TimeNs backoff(std::uint32_t refusals) {
  TimeNs b = kPinnedBackoffMin;
  for (std::uint32_t i = 1; i < refusals && b < kPinnedBackoffMax; ++i) b *= 2;
  return std::min(b, kPinnedBackoffMax);
}

// Sorted by start, touching or overlapping ranges joined.
std::vector<AddrRange> merged(std::vector<AddrRange> rs) {
  std::ranges::sort(rs, {}, &AddrRange::start);
  std::vector<AddrRange> out;
  for (const auto& r : rs) {
    if (r.end <= r.start) continue;
    if (!out.empty() && r.start <= out.back().end) {
      out.back().end = std::max(out.back().end, r.end);
    } else {
      out.push_back(r);
    }
  }
  return out;
}

bool overlap(AddrRange a, AddrRange b) {
  return a.start < b.end && b.start < a.end;
}

}  // namespace

void PinnedMap::refused(std::span<const AddrRange> ranges, TimeNs now) {
  for (const AddrRange r : merged({ranges.begin(), ranges.end()})) {
    std::uint32_t level = 0;
    TimeNs since = now;
    std::vector<PinnedRange> kept;
    for (const PinnedRange& e : ranges_) {
      if (e.source != PinSource::kRefused || !overlap(e.range, r)) {
        kept.push_back(e);
        continue;
      }
      level = std::max(level, e.refusals);
      since = std::min(since, e.since);
      // What lies outside r keeps its own backoff.
      if (e.range.start < r.start)
        kept.push_back({.range = {e.range.start, r.start},
                        .source = e.source,
                        .since = e.since,
                        .retry_at = e.retry_at,
                        .refusals = e.refusals});
      if (e.range.end > r.end)
        kept.push_back({.range = {r.end, e.range.end},
                        .source = e.source,
                        .since = e.since,
                        .retry_at = e.retry_at,
                        .refusals = e.refusals});
    }
    kept.push_back({.range = r,
                    .source = PinSource::kRefused,
                    .since = since,
                    .retry_at = now + backoff(level + 1),
                    .refusals = level + 1});
    ranges_ = std::move(kept);
  }
  rebuild(now);
}

void PinnedMap::set_registered(std::span<const AddrRange> ranges, TimeNs now) {
  const std::vector<AddrRange> fresh = merged({ranges.begin(), ranges.end()});
  std::vector<PinnedRange> kept;
  for (const PinnedRange& e : ranges_) {
    if (e.source == PinSource::kRefused) kept.push_back(e);
  }
  for (const AddrRange r : fresh) {
    TimeNs since = now;
    for (const PinnedRange& e : ranges_) {
      if (e.source == PinSource::kRegistered && e.range == r) since = e.since;
    }
    kept.push_back({.range = r, .source = PinSource::kRegistered, .since = since});
  }
  ranges_ = std::move(kept);
  rebuild(now);
}

void PinnedMap::expire(TimeNs now) {
  rebuild(now);
}

void PinnedMap::mapping_changed() {
  std::erase_if(ranges_, [](const PinnedRange& e) { return e.source == PinSource::kRefused; });
  std::vector<AddrRange> rs;
  rs.reserve(ranges_.size());
  for (const PinnedRange& e : ranges_) rs.push_back(e.range);
  active_ = merged(std::move(rs));
}

// Sorts the ranges, joins neighbouring refusals of one step, and lists what covers now.
void PinnedMap::rebuild(TimeNs now) {
  std::ranges::sort(ranges_, [](const PinnedRange& a, const PinnedRange& b) {
    return a.range.start != b.range.start ? a.range.start < b.range.start : a.source < b.source;
  });
  std::vector<PinnedRange> joined;
  for (const PinnedRange& e : ranges_) {
    if (!joined.empty()) {
      PinnedRange& last = joined.back();
      if (e.source == PinSource::kRefused && last.source == PinSource::kRefused &&
          last.range.end == e.range.start && last.retry_at == e.retry_at &&
          last.refusals == e.refusals) {
        last.range.end = e.range.end;
        last.since = std::min(last.since, e.since);
        continue;
      }
    }
    joined.push_back(e);
  }
  ranges_ = std::move(joined);
  std::vector<AddrRange> rs;
  for (const PinnedRange& e : ranges_) {
    if (e.source == PinSource::kRegistered || e.retry_at > now) rs.push_back(e.range);
  }
  active_ = merged(std::move(rs));
}

std::uint64_t PinnedMap::bytes() const {
  std::uint64_t sum = 0;
  for (const auto& r : active_) sum += r.bytes();
  return sum;
}

std::string PinnedMap::how(std::uint64_t addr, TimeNs now) const {
  std::string refused;
  for (const PinnedRange& e : ranges_) {
    if (!e.range.contains(addr)) continue;
    if (e.source == PinSource::kRegistered) return "io_uring registered buffer";
    if (e.retry_at > now) {
      refused =
          fmt::format("move_pages refused every attempt, {} time{} in a row; tried again in {}",
                      e.refusals, e.refusals == 1 ? "" : "s", format_duration(e.retry_at - now));
    }
  }
  return refused;
}

std::string PinnedMap::sources() const {
  bool registered = false;
  bool refused = false;
  for (const AddrRange r : active_) {
    for (const PinnedRange& e : ranges_) {
      if (!overlap(e.range, r)) continue;
      (e.source == PinSource::kRegistered ? registered : refused) = true;
    }
  }
  if (registered && refused) return "io_uring registered buffers, move_pages refusals";
  if (registered) return "io_uring registered buffers";
  return refused ? "move_pages refusals" : "";
}

}  // namespace kvtier::policy
