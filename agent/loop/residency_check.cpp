#include "agent/loop/residency_check.hpp"

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <optional>
#include <span>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "agent/host/host_paths.hpp"
#include "agent/host/residency.hpp"
#include "agent/host/sysfs.hpp"
#include "agent/loop/target_set.hpp"
#include "policy/heat.hpp"
#include "policy/heat_state.hpp"
#include "policy/types.hpp"

namespace kvtier::agent {
namespace {

// Appends `r` to sorted, disjoint `out`, joining it to the last range if they touch.
void append(std::vector<AddrRange>& out, AddrRange r) {
  if (!out.empty() && out.back().end >= r.start) {
    out.back().end = std::max(out.back().end, r.end);
  } else {
    out.push_back(r);
  }
}

// Sorted, disjoint ranges: the union of two such lists.
std::vector<AddrRange> merged(std::vector<AddrRange> a, std::span<const AddrRange> b) {
  a.insert(a.end(), b.begin(), b.end());
  std::ranges::sort(a, {}, &AddrRange::start);
  std::vector<AddrRange> out;
  out.reserve(a.size());
  for (const auto& r : a) append(out, r);
  return out;
}

// Which of the `n` candidates of the 2 MiB block holding `addr` check number
// `turn` asks about: a step of 167 (prime to 512) a check, offset by the block,
// so successive checks visit every candidate and neighbouring blocks differ.
std::uint64_t probe_index(std::uint64_t addr, std::uint64_t turn, std::uint64_t n) {
  return (turn * 167 + (addr / kHugePageSize) * 71) % n;
}

// The page of `part` (inside one 2 MiB block) that check number `turn` asks about.
std::uint64_t probe_page(AddrRange part, std::uint64_t turn) {
  const std::uint64_t start = part.start & ~(kPageSize - 1);
  const std::uint64_t pages =
      std::max<std::uint64_t>(1, (part.end - start + kPageSize - 1) / kPageSize);
  return start + probe_index(part.start, turn, pages) * kPageSize;
}

// The node of every probe from the runs read (address order, covering every
// probe); the parts of the probes that disagree with the table, and their number.
std::vector<AddrRange> disagreeing(std::span<const ResidencyProbes::Probe> probes,
                                   const PageMap& map, std::uint64_t* count) {
  std::vector<AddrRange> out;
  auto run = map.runs.begin();
  for (const auto& p : probes) {
    while (run != map.runs.end() && run->range.end <= p.page) ++run;
    const int node = run != map.runs.end() && run->range.contains(p.page) ? run->node : -1;
    if (node == p.node) continue;
    append(out, p.part);
    ++*count;
  }
  return out;
}

// Every huge block of the target: those outside `ranges` as the table had them,
// those inside as just read.
std::vector<std::uint64_t> with_huge(std::span<const std::uint64_t> had,
                                     std::span<const AddrRange> ranges,
                                     std::span<const std::uint64_t> found) {
  std::vector<std::uint64_t> out;
  out.reserve(had.size() + found.size());
  for (const std::uint64_t b : had) {
    const AddrRange block{b, b + kHugePageSize};
    auto it = std::ranges::upper_bound(ranges, b, {}, &AddrRange::start);
    const bool inside = (it != ranges.begin() && std::prev(it)->end > b) ||
                        (it != ranges.end() && it->start < block.end);
    if (!inside) out.push_back(b);
  }
  out.insert(out.end(), found.begin(), found.end());
  std::ranges::sort(out);
  const auto dup = std::ranges::unique(out);
  out.erase(dup.begin(), dup.end());
  return out;
}

}  // namespace

ProbeShare probe_share(std::uint64_t bytes, std::uint64_t check) {
  const std::uint64_t blocks = (bytes + kHugePageSize - 1) / kHugePageSize;
  const std::uint64_t every =
      std::max<std::uint64_t>(1, (blocks + kCheckProbeBlocks - 1) / kCheckProbeBlocks);
  return {.every = every, .at = check % every};
}

ResidencyProbes residency_probes(const policy::HeatTable& heat, TimeNs now, std::uint64_t turn,
                                 bool evidence_exact, ProbeShare share) {
  ResidencyProbes out;
  // The pages with their own state in the current 2 MiB block (probed: one of them, read
  // whole if it disagrees).
  std::vector<ResidencyProbes::Probe> block;
  const auto flush = [&] {
    if (block.empty()) return;
    if (!share.probed(block.front().page)) {
      block.clear();
      return;
    }
    const AddrRange part{block.front().page, block.back().page + kPageSize};
    const std::uint64_t i = probe_index(part.start, turn, block.size());
    out.probes.push_back({.page = block[i].page, .part = part, .node = block[i].node});
    block.clear();
  };
  // A chunk whose pages all have their own state on a known node: what its pages one by one
  // would give (the whole chunk in `exact`, or the block's one probe), without the walk.
  const auto located_chunk = [&](std::uint64_t base, const policy::PagePack& pages) {
    if (pages.located_pages() != policy::PagePack::kPages) return false;
    flush();
    const AddrRange chunk{base, base + kHugePageSize};
    if (evidence_exact) {
      append(out.exact, chunk);
    } else if (share.probed(base)) {
      const std::uint64_t i = probe_index(base, turn, policy::PagePack::kPages);
      out.probes.push_back(
          {.page = base + i * kPageSize, .part = chunk, .node = pages.get(i).node});
    }
    return true;
  };
  const auto unit = [&](const policy::HeatUnit& u, std::uint64_t n) {
    const AddrRange span{u.range.start, u.range.start + n * u.range.bytes()};
    if (!block.empty() && block.front().page / kHugePageSize != span.start / kHugePageSize) {
      flush();
    }
    if (u.node < 0 || (evidence_exact && span.bytes() <= kPageSize)) {
      append(out.exact, span);
      return;
    }
    if (span.bytes() <= kPageSize) {
      block.push_back({.page = span.start, .part = span, .node = u.node});
      return;
    }
    flush();
    // The first block of the span in the share, then every `every`-th.
    std::uint64_t b = span.start & ~(kHugePageSize - 1);
    if (const std::uint64_t r = (b / kHugePageSize + share.at) % share.every; r != 0) {
      b += (share.every - r) * kHugePageSize;
    }
    for (; b < span.end; b += share.every * kHugePageSize) {
      const AddrRange part{std::max(b, span.start), std::min(b + kHugePageSize, span.end)};
      out.probes.push_back({.page = probe_page(part, turn), .part = part, .node = u.node});
    }
  };
  heat.for_each_run(now, unit, located_chunk);
  flush();
  return out;
}

std::optional<std::uint64_t> kernel_moves(const HostPaths& host) {
  auto text = read_text(host.proc / "vmstat");
  if (!text) return std::nullopt;
  std::istringstream lines(*text);
  std::string name;
  std::uint64_t value = 0;
  std::uint64_t sum = 0;
  bool demote = false;
  while (lines >> name >> value) {
    if (name.starts_with("pgdemote_")) {
      demote = true;
      sum += value;
    } else if (name == "pgpromote_success") {
      sum += value;
    }
  }
  if (!demote) return std::nullopt;
  return sum;
}

PageMap table_runs(const policy::HeatTable& heat, TimeNs now) {
  PageMap out;
  heat.for_each_run(now, [&](const policy::HeatUnit& u, std::uint64_t n) {
    const AddrRange span{u.range.start, u.range.start + n * u.range.bytes()};
    if (!out.runs.empty() && out.runs.back().node == u.node &&
        out.runs.back().range.end == span.start) {
      out.runs.back().range.end = span.end;
    } else {
      out.runs.push_back({.range = span, .node = u.node});
    }
  });
  return out;
}

PageMap update_residency(ResidencyReader& reader, Target& t, TimeNs now, bool check,
                         std::uint64_t turn, std::optional<std::uint64_t> kernel_moved,
                         std::string* error, ResidencyReadCount* count) {
  ResidencyReadCount c;
  std::vector<AddrRange> full = merged(std::exchange(t.reread, {}), {});
  if (check) {
    // The kernel moved nothing anywhere since this target's last check: what it has not
    // been seen to move (samples, the mover) is where the table says, but for a probe.
    c.evidence_exact =
        !kernel_moved || !t.kernel_moves_at_check || *kernel_moved != *t.kernel_moves_at_check;
    t.kernel_moves_at_check = kernel_moved;
    std::uint64_t bytes = 0;
    for (const auto& v : t.vmas) bytes += v.bytes();
    const ResidencyProbes probes =
        residency_probes(*t.heat, now, turn, c.evidence_exact, probe_share(bytes, t.checks++));
    std::vector<AddrRange> pages;
    pages.reserve(probes.probes.size());
    for (const auto& p : probes.probes) pages.push_back({p.page, p.page + kPageSize});
    const PageMap found = reader.nodes(t.pid, pages, error);
    c.probes = pages.size();
    const std::vector<AddrRange> wrong = disagreeing(probes.probes, found, &c.blocks_reread);
    full = merged(std::move(full), probes.exact);
    full = merged(std::move(full), wrong);
  }
  for (const auto& r : full) c.pages += r.bytes() / kPageSize;
  c.pages += c.probes;
  PageMap map = reader.nodes(t.pid, full, error);
  for (const auto& run : map.runs) t.heat->set_node(run.range, run.node);
  // The huge pages: of every mapping at a check (the probe reads a word or two
  // per 2 MiB block), else of what was read in full.
  const std::vector<AddrRange>& huge_ranges = check ? t.vmas : full;
  t.huge_blocks = with_huge(t.huge_blocks, huge_ranges, reader.huge_blocks(t.pid, huge_ranges));
  t.heat->set_huge_blocks(t.huge_blocks);
  map.huge_blocks = t.huge_blocks;
  if (count != nullptr) *count = c;
  return map;
}

}  // namespace kvtier::agent
