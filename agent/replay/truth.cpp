#include "agent/replay/truth.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <utility>
#include <variant>
#include <vector>

#include "agent/loop/recording.hpp"
#include "policy/types.hpp"

namespace kvtier::agent {
namespace {

TimeNs midpoint(const RecAccesses& w) {
  return w.begin + (w.end - w.begin) / 2;
}

double ratio(double part, double whole) {
  return whole > 0 ? part / whole : 0.0;
}

}  // namespace

void TruthScore::add(const TruthScore& o) {
  read_bytes += o.read_bytes;
  dram_read_bytes += o.dram_read_bytes;
  unplaced_read_bytes += o.unplaced_read_bytes;
  judged_steps += o.judged_steps;
  slow_pages += o.slow_pages;
  cold_pages += o.cold_pages;
  slow_cold_pages += o.slow_cold_pages;
  demoted_bytes += o.demoted_bytes;
  misdemoted_bytes += o.misdemoted_bytes;
  unjudged_demoted_bytes += o.unjudged_demoted_bytes;
}

double TruthScore::dram_share() const {
  return ratio(dram_read_bytes, read_bytes);
}
double TruthScore::precision() const {
  return ratio(static_cast<double>(slow_cold_pages), static_cast<double>(slow_pages));
}
double TruthScore::recall() const {
  return ratio(static_cast<double>(slow_cold_pages), static_cast<double>(cold_pages));
}
double TruthScore::misdemoted_share() const {
  return ratio(static_cast<double>(misdemoted_bytes), static_cast<double>(demoted_bytes));
}

TruthIndex::TruthIndex(std::vector<RecAccesses> windows, TimeNs cold_age)
    : windows_(std::move(windows)), cold_age_(cold_age) {
  std::ranges::stable_sort(windows_, {}, [](const RecAccesses& w) { return midpoint(w); });
  for (const auto& w : windows_) {
    auto [it, fresh] = pools_.try_emplace(w.pid);
    Pool& p = it->second;
    if (fresh) {
      p.base = w.base;
      p.block_bytes = w.block_bytes;
      p.blocks = w.bytes_read.size();
      p.begin = w.begin;
      p.reads.resize(p.blocks);
    }
    if (w.base != p.base || w.block_bytes != p.block_bytes || w.bytes_read.size() != p.blocks ||
        w.block_bytes == 0) {
      ++skipped_;
      continue;
    }
    p.begin = std::min(p.begin, w.begin);
    p.end = std::max(p.end, w.end);
    for (std::size_t b = 0; b < w.bytes_read.size(); ++b) {
      if (w.bytes_read[b] > 0) p.reads[b].push_back(midpoint(w));
    }
  }
}

std::vector<const RecAccesses*> TruthIndex::take_until(TimeNs until) {
  std::vector<const RecAccesses*> out;
  while (next_ < windows_.size() && midpoint(windows_[next_]) < until) {
    out.push_back(&windows_[next_++]);
  }
  return out;
}

void TruthIndex::score_reads(const RecAccesses& w, const PageNodes& placement, const IsDram& dram,
                             TruthScore& out) {
  if (w.block_bytes == 0) return;
  const std::uint64_t pages = std::max<std::uint64_t>(1, w.block_bytes / kPageSize);
  for (std::size_t b = 0; b < w.bytes_read.size(); ++b) {
    if (w.bytes_read[b] == 0) continue;
    const double per_page = static_cast<double>(w.bytes_read[b]) / static_cast<double>(pages);
    const std::uint64_t start = w.base + b * w.block_bytes;
    for (std::uint64_t i = 0; i < pages; ++i) {
      const int node = placement.get(w.pid, start + i * kPageSize);
      if (node < 0) {
        out.unplaced_read_bytes += per_page;
        continue;
      }
      out.read_bytes += per_page;
      if (dram(node)) out.dram_read_bytes += per_page;
    }
  }
}

void TruthIndex::score_placement(const PageNodes& placement, TimeNs now, const IsDram& dram,
                                 TruthScore& out) const {
  bool judged = false;
  for (const auto& [pid, p] : pools_) {
    if (now < p.begin + cold_age_ || now > p.end) continue;
    judged = true;
    const std::uint64_t pages = std::max<std::uint64_t>(1, p.block_bytes / kPageSize);
    for (std::size_t b = 0; b < p.blocks; ++b) {
      const auto& r = p.reads[b];
      const auto it = std::ranges::lower_bound(r, now - cold_age_);
      const bool cold = it == r.end() || *it >= now;
      for (std::uint64_t i = 0; i < pages; ++i) {
        const int node = placement.get(pid, p.base + b * p.block_bytes + i * kPageSize);
        if (node < 0) continue;
        const bool slow = !dram(node);
        out.slow_pages += slow ? 1 : 0;
        out.cold_pages += cold ? 1 : 0;
        out.slow_cold_pages += slow && cold ? 1 : 0;
      }
    }
  }
  out.judged_steps += judged ? 1 : 0;
}

const TruthIndex::Pool* TruthIndex::pool_of(Pid pid, std::uint64_t addr, std::size_t& block) const {
  auto it = pools_.find(pid);
  if (it == pools_.end()) return nullptr;
  const Pool& p = it->second;
  if (addr < p.base || addr >= p.base + p.blocks * p.block_bytes) return nullptr;
  block = (addr - p.base) / p.block_bytes;
  return &p;
}

bool TruthIndex::read_between(Pid pid, std::uint64_t addr, TimeNs from, TimeNs to) const {
  std::size_t b = 0;
  const Pool* p = pool_of(pid, addr, b);
  if (p == nullptr) return false;
  const auto it = std::ranges::lower_bound(p->reads[b], from);
  return it != p->reads[b].end() && *it < to;
}

void TruthIndex::score_demotions(const std::vector<PageChange>& changes, TimeNs now,
                                 const IsDram& dram, TruthScore& out) const {
  for (const auto& c : changes) {
    if (c.from < 0 || c.to < 0 || !dram(c.from) || dram(c.to)) continue;
    std::size_t b = 0;
    const Pool* p = pool_of(c.pid, c.addr, b);
    if (p == nullptr || now < p->begin) continue;
    if (now + cold_age_ > p->end) {
      out.unjudged_demoted_bytes += kPageSize;
      continue;
    }
    out.demoted_bytes += kPageSize;
    if (read_between(c.pid, c.addr, now, now + cold_age_)) out.misdemoted_bytes += kPageSize;
  }
}

std::vector<RecAccesses> truth_windows(const Recording& rec) {
  std::vector<RecAccesses> out;
  for (const auto& r : rec.records) {
    if (const auto* a = std::get_if<RecAccesses>(&r)) out.push_back(*a);
  }
  return out;
}

}  // namespace kvtier::agent
