#include "agent/host/residency.hpp"

#include <algorithm>
#include <charconv>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "agent/host/host_paths.hpp"
#include "agent/host/huge_pages.hpp"
#include "agent/host/move_pages_call.hpp"
#include "agent/host/sysfs.hpp"
#include "policy/error.hpp"
#include "policy/types.hpp"

namespace kvtier::agent {
namespace {

template <class T>
bool parse_num(std::string_view s, T& out, int base = 10) {
  const auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), out, base);
  return ec == std::errc{} && ptr == s.data() + s.size() && !s.empty();
}

}  // namespace

ResidencyReader::ResidencyReader(MovePagesFn query, std::size_t batch_pages,
                                 std::shared_ptr<HugePageProbe> huge)
    : query_(std::move(query)),
      batch_pages_(std::max<std::size_t>(1, batch_pages)),
      huge_(std::move(huge)) {}

template <class Visit>
Result<void> ResidencyReader::query(Pid pid, std::span<const AddrRange> ranges, Visit&& visit) {
  addrs_.clear();
  const auto flush = [&]() -> Result<void> {
    if (addrs_.empty()) return {};
    status_.assign(addrs_.size(), 0);
    const auto q = query_(pid, addrs_, nullptr, status_, 0);
    if (q.ret < 0) {
      return fail(fmt::format("move_pages status query of pid {}: {}", pid, errno_text(q.err)),
                  q.err);
    }
    for (std::size_t k = 0; k < addrs_.size(); ++k) {
      visit(reinterpret_cast<std::uint64_t>(addrs_[k]), status_[k]);
    }
    addrs_.clear();
    return {};
  };
  for (const auto& r : ranges) {
    for (std::uint64_t page = r.start & ~(kPageSize - 1); page < r.end; page += kPageSize) {
      addrs_.push_back(reinterpret_cast<void*>(page));  // NOLINT(performance-no-int-to-ptr)
      if (addrs_.size() < batch_pages_) continue;
      if (auto ok = flush(); !ok) return ok;
    }
  }
  return flush();
}

Result<std::vector<RangeResidency>> ResidencyReader::read(Pid pid,
                                                          std::span<const AddrRange> ranges) {
  std::vector<RangeResidency> out;
  out.reserve(ranges.size());
  for (const auto& r : ranges) {
    RangeResidency res{.range = r};
    auto ok = query(pid, std::span(&r, 1), [&res](std::uint64_t, int s) {
      if (s >= 0) {
        res.bytes_per_node[s] += kPageSize;
      } else if (classify_status(s) == PageStatus::kNotPresent) {
        res.not_present_bytes += kPageSize;
      } else {
        res.other_bytes += kPageSize;
      }
    });
    if (!ok) return std::unexpected(ok.error());
    out.push_back(std::move(res));
  }
  return out;
}

PageMap ResidencyReader::map(Pid pid, std::span<const AddrRange> ranges, std::string* error) {
  std::string failed;
  PageMap out = nodes(pid, ranges, &failed);
  if (!failed.empty()) {
    if (error != nullptr) *error = std::move(failed);
    return out;
  }
  out.huge_blocks = huge_blocks(pid, ranges);
  return out;
}

std::vector<std::uint64_t> ResidencyReader::huge_blocks(Pid pid,
                                                        std::span<const AddrRange> ranges) {
  std::vector<std::uint64_t> out;
  if (!huge_) return out;
  for (const auto& r : ranges) {
    auto blocks = huge_->huge_blocks(pid, r);
    if (blocks) out.insert(out.end(), blocks->begin(), blocks->end());
  }
  std::ranges::sort(out);
  const auto dup = std::ranges::unique(out);
  out.erase(dup.begin(), dup.end());
  return out;
}

PageMap ResidencyReader::nodes(Pid pid, std::span<const AddrRange> ranges, std::string* error) {
  PageMap out;
  auto add_page = [&out](std::uint64_t addr, int status) {
    const int node = status >= 0 ? status : -1;
    (node >= 0 ? out.bytes_per_node[node] : out.not_present_bytes) += kPageSize;
    if (!out.runs.empty() && out.runs.back().node == node && out.runs.back().range.end == addr) {
      out.runs.back().range.end = addr + kPageSize;
    } else {
      out.runs.push_back({.range = {addr, addr + kPageSize}, .node = node});
    }
  };
  if (auto ok = query(pid, ranges, add_page); !ok && error != nullptr) *error = ok.error().message;
  return out;
}

std::uint64_t NumaMapsEntry::bytes_on(int node) const {
  auto it = pages_per_node.find(node);
  return it == pages_per_node.end() ? 0 : it->second * page_size;
}

Result<std::vector<NumaMapsEntry>> parse_numa_maps(std::string_view text, std::string_view what) {
  std::vector<NumaMapsEntry> entries;
  std::size_t line_no = 0;
  while (!text.empty()) {
    ++line_no;
    std::string_view line = take_line(text);
    if (line.empty()) continue;
    NumaMapsEntry e;
    std::size_t field = 0;
    while (!line.empty()) {
      const auto sp = line.find(' ');
      const std::string_view tok = line.substr(0, sp);
      line.remove_prefix(sp == std::string_view::npos ? line.size() : sp + 1);
      if (tok.empty()) continue;
      ++field;
      if (field == 1) {
        if (!parse_num(tok, e.start, 16)) {
          return fail(
              fmt::format("{}:{}: expected a hex start address, found '{}'", what, line_no, tok));
        }
        continue;
      }
      if (field == 2) {
        e.policy = std::string(tok);
        continue;
      }
      const auto eq = tok.find('=');
      const std::string_view key = tok.substr(0, eq);
      const std::string_view val = eq == std::string_view::npos ? "" : tok.substr(eq + 1);
      if (key == "anon" && eq != std::string_view::npos) {
        e.anon = true;
      } else if (key == "huge") {
        e.huge = true;
      } else if (key == "file") {
        e.file = std::string(val);
      } else if (key == "kernelpagesize_kB") {
        std::uint64_t kb = 0;
        if (!parse_num(val, kb)) {
          return fail(fmt::format("{}:{}: bad kernelpagesize_kB '{}'", what, line_no, val));
        }
        e.page_size = kb * 1024;
      } else if (key.size() > 1 && key[0] == 'N') {
        int node = 0;
        std::uint64_t pages = 0;
        if (!parse_num(key.substr(1), node) || !parse_num(val, pages)) {
          return fail(fmt::format("{}:{}: bad node count '{}'", what, line_no, tok));
        }
        e.pages_per_node[node] += pages;
      }
    }
    if (field < 2) {
      return fail(fmt::format("{}:{}: expected '<start> <policy> ...'", what, line_no));
    }
    entries.push_back(std::move(e));
  }
  return entries;
}

std::map<int, std::uint64_t> numa_maps_bytes(std::span<const NumaMapsEntry> entries,
                                             std::span<const AddrRange> ranges) {
  std::map<int, std::uint64_t> bytes;
  for (const auto& e : entries) {
    const bool wanted =
        ranges.empty() || std::any_of(ranges.begin(), ranges.end(),
                                      [&](const AddrRange& r) { return r.contains(e.start); });
    if (!wanted) continue;
    for (const auto& [node, pages] : e.pages_per_node) bytes[node] += pages * e.page_size;
  }
  return bytes;
}

Result<std::vector<NumaMapsEntry>> read_numa_maps(const HostPaths& host, Pid pid) {
  const auto path = host.proc / std::to_string(pid) / "numa_maps";
  auto text = read_text(path);
  if (!text) return std::unexpected(text.error());
  return parse_numa_maps(*text, path.string());
}

}  // namespace kvtier::agent
