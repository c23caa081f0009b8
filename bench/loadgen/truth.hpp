#pragma once
// The ground truth of llama-server's KV buffer (issue 38, item 4), without changing the server:
// the buffer's layout is the engine's published one (per layer a K and a V tensor, in that
// order, each one stream per slot of `cells` rows of `row_bytes`), and each /completion
// response says which slot answered (id_slot) and how many cells it holds (tokens_cached:
// rows 0 to tokens_cached - 1 of the slot's stream in every tensor). A page is
//   active: it holds a row in use by a slot that is answering or answered within the cold age,
//   idle:   else a row in use by a slot that has not answered within the cold age,
//   unused: else (no slot's cells reach it).
// A page shared by two slots' rows (the buffer's data starts a few bytes into its first page)
// takes the first class of that order that any of its bytes has.

#include <cstdint>
#include <span>
#include <vector>

namespace kvtier::bench::loadgen {

inline constexpr std::uint64_t kTruthPage = 4096;

struct KvLayout {
  std::uint64_t data = 0;  // address of the first byte of layer 0's K tensor
  std::uint32_t layers = 4;
  std::uint32_t slots = 12;
  std::uint32_t cells = 8192;  // per slot
  std::uint32_t row_bytes = 512;

  [[nodiscard]] std::uint64_t stream_bytes() const { return std::uint64_t{cells} * row_bytes; }
  [[nodiscard]] std::uint64_t tensor_bytes() const { return stream_bytes() * slots; }
  [[nodiscard]] std::uint64_t bytes() const { return tensor_bytes() * 2 * layers; }
  // The pages the buffer touches: [first_page(), end_page()).
  [[nodiscard]] std::uint64_t first_page() const { return data & ~(kTruthPage - 1); }
  [[nodiscard]] std::uint64_t end_page() const {
    return (data + bytes() + kTruthPage - 1) & ~(kTruthPage - 1);
  }
  [[nodiscard]] std::size_t pages() const {
    return static_cast<std::size_t>((end_page() - first_page()) / kTruthPage);
  }
};

enum class PageClass : std::uint8_t { kActive = 0, kIdle = 1, kUnused = 2 };
inline constexpr int kPageClasses = 3;
const char* page_class_name(PageClass c);

struct SlotState {
  std::int64_t cells = 0;         // tokens_cached of its last answer
  double last_answer_s = -1e300;  // when it last answered
  bool busy = false;              // a request is in flight on it
};

// One class per page of the buffer, from first_page(). `slots` has layout.slots entries.
std::vector<PageClass> classify_pages(const KvLayout& layout, std::span<const SlotState> slots,
                                      double now_s, double cold_age_s);

// Where pages are: runs of pages on one node (-1: not present or any other status).
struct NodeRun {
  std::uint64_t start = 0;
  std::uint64_t end = 0;
  int node = -1;
};

// Bytes per class and node (0, 1, or -1 for anything else), pages outside `runs` counted -1.
struct ClassBytes {
  std::uint64_t bytes[kPageClasses][3] = {};  // [class][node 0, node 1, other]
  [[nodiscard]] std::uint64_t on(PageClass c, int node) const {
    return bytes[static_cast<int>(c)][node == 0 ? 0 : node == 1 ? 1 : 2];
  }
  [[nodiscard]] std::uint64_t total(PageClass c) const {
    const auto* b = bytes[static_cast<int>(c)];
    return b[0] + b[1] + b[2];
  }
};
ClassBytes tally(const KvLayout& layout, std::span<const PageClass> classes,
                 std::span<const NodeRun> runs);

}  // namespace kvtier::bench::loadgen
