#include "bench/loadgen/truth.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace kvtier::bench::loadgen {

const char* page_class_name(PageClass c) {
  switch (c) {
    case PageClass::kActive:
      return "active";
    case PageClass::kIdle:
      return "idle";
    case PageClass::kUnused:
      return "unused";
  }
  return "?";
}

std::vector<PageClass> classify_pages(const KvLayout& layout, std::span<const SlotState> slots,
                                      double now_s, double cold_age_s) {
  std::vector<PageClass> classes(layout.pages(), PageClass::kUnused);
  const std::uint64_t base = layout.first_page();
  const std::size_t n = std::min<std::size_t>(slots.size(), layout.slots);
  for (std::uint32_t t = 0; t < 2 * layout.layers; ++t) {
    for (std::size_t s = 0; s < n; ++s) {
      const SlotState& slot = slots[s];
      const auto cells = static_cast<std::uint64_t>(
          std::clamp<std::int64_t>(slot.cells, 0, static_cast<std::int64_t>(layout.cells)));
      if (cells == 0) {
        continue;
      }
      const PageClass c = slot.busy || now_s - slot.last_answer_s <= cold_age_s ? PageClass::kActive
                                                                                : PageClass::kIdle;
      const std::uint64_t start =
          layout.data + t * layout.tensor_bytes() + s * layout.stream_bytes();
      const std::uint64_t end = start + cells * layout.row_bytes;
      for (std::uint64_t p = (start - base) / kTruthPage; p <= (end - 1 - base) / kTruthPage; ++p) {
        classes[p] = std::min(classes[p], c);
      }
    }
  }
  return classes;
}

ClassBytes tally(const KvLayout& layout, std::span<const PageClass> classes,
                 std::span<const NodeRun> runs) {
  ClassBytes out;
  std::vector<int> node(classes.size(), -1);
  const std::uint64_t base = layout.first_page();
  const std::uint64_t limit = base + classes.size() * kTruthPage;
  for (const NodeRun& r : runs) {
    for (std::uint64_t a = std::max(r.start, base) & ~(kTruthPage - 1); a < std::min(r.end, limit);
         a += kTruthPage) {
      node[(a - base) / kTruthPage] = r.node;
    }
  }
  for (std::size_t p = 0; p < classes.size(); ++p) {
    const int col = node[p] == 0 ? 0 : node[p] == 1 ? 1 : 2;
    out.bytes[static_cast<int>(classes[p])][col] += kTruthPage;
  }
  return out;
}

}  // namespace kvtier::bench::loadgen
