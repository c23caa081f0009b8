#include "policy/planner.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <map>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "policy/config.hpp"
#include "policy/heat.hpp"
#include "policy/heat_state.hpp"
#include "policy/pinned.hpp"
#include "policy/rules.hpp"
#include "policy/topology.hpp"
#include "policy/types.hpp"
#include "policy/units.hpp"

namespace kvtier::policy {
namespace {

// One movable unit that some rule might move, in 24 bytes (there may be millions).
// `key` orders it: for demotion coldest first (heat bits, then older last
// access), for promotion hottest first. The node rides in the page offset bits
// of the start address.
struct Cand {
  std::uint64_t key = 0;
  std::uint64_t start_node = 0;
  std::uint32_t target = 0;
  std::uint32_t pages = 0;

  static Cand make(std::uint64_t key, std::uint64_t start, int node, std::uint32_t target,
                   std::uint32_t pages) {
    return Cand{.key = key,
                .start_node = start | static_cast<std::uint64_t>(node),
                .target = target,
                .pages = pages};
  }
  [[nodiscard]] std::uint64_t start() const { return start_node & ~(kPageSize - 1); }
  [[nodiscard]] std::int16_t node() const {
    return static_cast<std::int16_t>(start_node & (kPageSize - 1));
  }
  [[nodiscard]] std::uint64_t bytes() const { return std::uint64_t{pages} * kPageSize; }
  friend bool operator<(const Cand& a, const Cand& b) {
    return std::tie(a.key, a.target, a.start_node) < std::tie(b.key, b.target, b.start_node);
  }
};
static_assert(sizeof(Cand) == 24);

// Keeps the k smallest candidates seen, in O(n) amortised time and O(k) memory:
// the planner never takes more units than the budget holds pages.
class Smallest {
 public:
  explicit Smallest(std::size_t k) : k_(std::max<std::size_t>(k, 1)) {}
  void push(const Cand& c) {
    if (full_ && (c.key > worst_.key || !(c < worst_))) return;
    // Room for the common case only: k_ is the budget in pages (65536 for 256 MiB), and
    // reserving 2 * k_ up front mapped megabytes at every plan that touched a few pages
    // of them (a 2 MiB huge page zeroed each, with transparent huge pages "always").
    if (buf_.empty()) buf_.reserve(std::min<std::size_t>(2 * k_ + 1024, kFirstReserve));
    buf_.push_back(c);
    if (buf_.size() >= 2 * k_ + 1024) shrink();
  }
  // n candidates alike but for their start, `stride` bytes apart: the same as
  // n pushes, stopping at the first one refused (the ones after it sort after
  // it, and the worst kept only ever gets better).
  void push_run(Cand c, std::uint64_t n, std::uint64_t stride) {
    for (; n > 0; --n, c.start_node += stride) {
      if (full_ && !(c < worst_)) return;
      push(c);
    }
  }
  std::vector<Cand> sorted() && {
    shrink();
    std::sort(buf_.begin(), buf_.end());
    buf_.shrink_to_fit();
    return std::move(buf_);
  }

 private:
  void shrink() {
    if (buf_.size() <= k_) return;
    std::nth_element(buf_.begin(), buf_.begin() + static_cast<std::ptrdiff_t>(k_ - 1), buf_.end());
    buf_.resize(k_);
    worst_ = *std::max_element(buf_.begin(), buf_.end());
    full_ = true;
  }
  static constexpr std::size_t kFirstReserve = 2048;
  std::size_t k_;
  std::vector<Cand> buf_;
  Cand worst_;
  bool full_ = false;
};

// Heat and last access back from a demotion key.
float key_heat(std::uint64_t key) {
  return std::bit_cast<float>(static_cast<std::uint32_t>(key >> 32));
}
std::uint32_t key_access(std::uint64_t key) {
  return static_cast<std::uint32_t>(key);
}

std::uint64_t heat_bits(float h) {
  // Non-negative floats order like their bit patterns.
  return std::bit_cast<std::uint32_t>(std::max(h, 0.0F));
}

enum class Why : std::uint8_t { kColdAge, kDramLimit, kKeepFree, kHeadroom, kExchange, kPromote };

struct Chosen {
  std::uint32_t target = 0;
  std::uint64_t start = 0;
  std::uint64_t bytes = 0;
  std::int16_t from = -1;
  std::int16_t to = -1;
  Why why = Why::kColdAge;
  float heat = 0.0F;
  std::uint32_t last_access = 0;
};

// A demotion candidate of the room pass and the cold-age pass, with its rule
// (kCold, kCooling or kWarm): what either pass may take it for.
struct Ranked {
  Cand c;
  Rule rule;
};

struct GroupWork {
  std::size_t index = 0;
  const GroupConfig* cfg = nullptr;
  GroupRules rules;
  std::uint64_t dram_use = 0;
  Smallest cold;     // kCold
  Smallest cooling;  // kCooling: for DRAM headroom
  Smallest warm;     // kWarm: for the group's own limits (dram_limit, keep_free)
  Smallest hot;      // kAccessedOnSlow
  // The demotion candidates of the room and cold-age passes, coldest first, and
  // which of them moved: what stayed is the plan's spare (plan()'s `spare`).
  std::vector<Ranked> order;
  std::vector<bool> order_taken;
  std::size_t exchange_from = 0;  // order[..exchange_from) holds no exchangeable unit left
  // Per destination node: the exchangeable bytes a whole scan found when it fell
  // short. Units only leave the order, so a deficit above it fails without
  // another scan (thousands of waiting pages would each scan every spare unit).
  std::map<int, std::uint64_t> exchange_short;
  GroupWork(std::size_t i, const GroupConfig* c, GroupRules r, std::size_t k)
      : index(i), cfg(c), rules(std::move(r)), cold(k), cooling(k), warm(k), hot(k) {}
};

class Planner {
 public:
  explicit Planner(const Snapshot& s)
      : s_(s), topo_(*s.topology), facts_(topo_), budget_(s.budget_bytes) {
    nodes_.resize(facts_.size());
    for (const auto& n : topo_.nodes) {
      Node& st = nodes_[static_cast<std::size_t>(n.id)];
      st.present = true;
      st.fast = n.has_cpus() && !facts_.slow(n.id) && facts_.demote_to(n.id) >= 0;
      st.total = n.mem_total_bytes;
      st.free = n.usable_free_bytes();
      st.headroom = st.fast ? headroom_of(n) : 0;
    }
  }

  Plan run(std::vector<SpareUnit>* spare) {
    make_groups();
    for (std::uint32_t t = 0; t < s_.targets.size(); ++t) scan(t);
    const auto [up, down] = group_orders();

    // What waits for promotion comes first: its bytes count as room to make (an
    // exchange of colder units for hotter ones) before the headroom is judged.
    std::vector<std::vector<Cand>> hot(groups_.size());
    for (GroupWork* g : down) {
      hot[g->index] = std::move(g->hot).sorted();
      add_demand(hot[g->index]);
    }
    // A DRAM node that has to make room in this plan (short of its headroom plus
    // what waits) is under pressure: the rules' second step (cold_age_round) is
    // told so.
    for (std::size_t id = 0; id < nodes_.size(); ++id) {
      nodes_[id].pressed = short_of_headroom(static_cast<int>(id)) > 0;
    }
    for (GroupWork* g : up) room(*g, std::move(g->cold).sorted());
    headroom_notes();
    for (GroupWork* g : down) promote(*g, hot[g->index]);
    for (GroupWork* g : up) cold_age(*g);
    if (spare != nullptr) {
      for (GroupWork* g : up) add_spare(*g, *spare);
    }
    return finish();
  }

  // Promotions only, of the given units (the loop's fast path between steps):
  // the same rule and the same limits, no demotion, no scan of every unit.
  Plan run_promotions(std::span<const PromotionCandidate> cands,
                      std::span<const PromotionCandidate> spare) {
    make_groups();
    for (const auto& pc : spare) {
      const TargetView& tv = s_.targets[pc.target];
      if (tv.group >= groups_.size()) continue;
      GroupWork& g = groups_[tv.group];
      const HeatUnit& u = pc.unit;
      if (overlaps_any(tv.pinned, u.range)) continue;
      const Rule rule = g.rules.classify(u, tv.dram_reads_unseen);
      const bool warm = rule == Rule::kWarm && g.rules.exchangeable(u.last_access);
      if (rule != Rule::kCold && rule != Rule::kCooling && !warm) continue;
      (rule == Rule::kCold      ? g.cold
       : rule == Rule::kCooling ? g.cooling
                                : g.warm)
          .push(Cand::make(heat_bits(u.heat) << 32 | u.last_access, u.range.start, u.node,
                           static_cast<std::uint32_t>(pc.target),
                           static_cast<std::uint32_t>(u.range.bytes() / kPageSize)));
    }
    for (const auto& pc : cands) {
      const TargetView& tv = s_.targets[pc.target];
      if (tv.group >= groups_.size()) continue;
      GroupWork& g = groups_[tv.group];
      const HeatUnit& u = pc.unit;
      const Rule rule = g.rules.classify(u);
      const bool wanted = rule == Rule::kAccessedOnSlow ||
                          (pc.by_group && rule == Rule::kStaysOnSlow && g.rules.promotes());
      if (!wanted || overlaps_any(tv.pinned, u.range)) continue;
      g.hot.push(
          Cand::make((~heat_bits(u.heat) & 0xffffffffULL) << 32 | (~u.last_access & 0xffffffffU),
                     u.range.start, u.node, static_cast<std::uint32_t>(pc.target),
                     static_cast<std::uint32_t>(u.range.bytes() / kPageSize)));
    }
    const auto [up, down] = group_orders();
    std::vector<std::vector<Cand>> hot(groups_.size());
    for (GroupWork* g : down) {
      hot[g->index] = std::move(g->hot).sorted();
      add_demand(hot[g->index]);
    }
    // An exchange: the spare's coldest make room for what waits, as in run().
    for (GroupWork* g : up) room(*g, std::move(g->cold).sorted());
    for (GroupWork* g : down) promote(*g, hot[g->index]);
    return finish();
  }

 private:
  void make_groups() {
    const std::size_t k = static_cast<std::size_t>(
        std::min<std::uint64_t>(budget_ / kPageSize + 1, std::uint64_t{1} << 26));
    groups_.reserve(s_.groups.size());
    for (std::size_t i = 0; i < s_.groups.size(); ++i) {
      const std::optional<TimeNs> cold_age =
          i < s_.cold_age.size() ? std::optional<TimeNs>(s_.cold_age[i]) : std::nullopt;
      groups_.emplace_back(i, &s_.groups[i], GroupRules(s_.groups[i], facts_, s_.now, cold_age), k);
    }
  }

  // Low priority gives DRAM up first and gets it back last; file order breaks ties.
  std::pair<std::vector<GroupWork*>, std::vector<GroupWork*>> group_orders() {
    std::vector<GroupWork*> up;
    up.reserve(groups_.size());
    for (auto& g : groups_) up.push_back(&g);
    std::ranges::stable_sort(up, [](const GroupWork* a, const GroupWork* b) {
      return a->cfg->priority < b->cfg->priority;
    });
    std::vector<GroupWork*> down(up.rbegin(), up.rend());
    std::ranges::stable_sort(down, [](const GroupWork* a, const GroupWork* b) {
      return a->cfg->priority > b->cfg->priority;
    });
    return {std::move(up), std::move(down)};
  }

  struct Node {
    bool present = false;
    bool fast = false;  // a CPU node kvtier demotes from: keeps DRAM headroom
    std::uint64_t total = 0;
    std::uint64_t free = 0;
    std::uint64_t headroom = 0;  // free memory the room pass keeps (fast nodes)
    std::uint64_t demand = 0;    // bytes waiting to be promoted to it
    bool full = false;           // a demotion to it did not fit: later ones would not either
    bool pressed = false;        // short of its headroom plus demand when the plan began
  };

  // Free memory a fast node keeps for promotions (the kernel's in the fault path,
  // and kvtier's): limits.dram_headroom of it above min_free, which no move
  // crosses. kvtier's own promotions use half of it at most while the kernel
  // promotes in the fault path (Snapshot::fault_path_promotions), all of it else.
  [[nodiscard]] std::uint64_t headroom_of(const NumaNode& n) const {
    return s_.limits.min_free + static_cast<std::uint64_t>(s_.limits.dram_headroom *
                                                           static_cast<double>(n.mem_total_bytes));
  }
  // How much the room pass still has to free on node `id`: its headroom plus what
  // waits to be promoted to it.
  [[nodiscard]] std::uint64_t short_of_headroom(int id) {
    const Node* n = node(id);
    if (n == nullptr || !n->fast) return 0;
    const std::uint64_t want = n->headroom + n->demand;
    return n->free < want ? want - n->free : 0;
  }

  Node* node(int id) {
    if (id < 0 || static_cast<std::size_t>(id) >= nodes_.size()) return nullptr;
    Node* n = &nodes_[static_cast<std::size_t>(id)];
    return n->present ? n : nullptr;
  }

  int promotion_dest(const TargetView& t, int from) {
    if (t.home_node && node(*t.home_node) != nullptr) return *t.home_node;
    const NumaNode* n = topo_.find(from);
    int best = -1;
    int best_dist = std::numeric_limits<int>::max();
    for (const auto& c : topo_.nodes) {
      if (!c.has_cpus()) continue;
      auto it = n->distance.find(c.id);
      const int d = it == n->distance.end() ? std::numeric_limits<int>::max() - 1 : it->second;
      if (d < best_dist) {
        best = c.id;
        best_dist = d;
      }
    }
    return best;
  }

  // Sorts every unit of target t by the rule that applies to it: demotion and
  // promotion candidates are kept (the k best of each), the rest stays.
  // Kept out of run(): inlined there, the per-unit loop spills its values to
  // the stack (plan_bench: about 12% slower).
  [[gnu::noinline]] void scan(std::uint32_t t) {
    const TargetView& tv = s_.targets[t];
    if (tv.heat == nullptr || tv.group >= groups_.size()) return;
    GroupWork& g = groups_[tv.group];
    const GroupRules& rules = g.rules;
    const bool take_warm = rules.watermark();
    const bool unseen = tv.dram_reads_unseen;
    std::uint64_t dram_use = 0;
    // n alike units from u on (one run of HeatTable::for_each_run); inlined.
    auto one = [&](const HeatUnit& u, std::uint64_t n) __attribute__((always_inline)) {
      const Rule rule = rules.classify(u, unseen);
      if (rule == Rule::kUnknownNode) return;
      const bool slow = rule == Rule::kAccessedOnSlow || rule == Rule::kStaysOnSlow ||
                        (rule == Rule::kExcluded && rules.slow(u.node));
      if (!slow) dram_use += n * u.range.bytes();
      if (!tv.pinned.empty() && overlaps_any(tv.pinned, u.range)) return;
      const std::uint64_t stride = u.range.bytes();
      const auto pages = static_cast<std::uint32_t>(stride / kPageSize);
      if (rule == Rule::kCold || rule == Rule::kCooling ||
          (rule == Rule::kWarm && (take_warm || rules.exchangeable(u.last_access)))) {
        const Cand c =
            Cand::make(heat_bits(u.heat) << 32 | u.last_access, u.range.start, u.node, t, pages);
        (rule == Rule::kCold      ? g.cold
         : rule == Rule::kCooling ? g.cooling
                                  : g.warm)
            .push_run(c, n, stride);
      } else if (rule == Rule::kAccessedOnSlow) {
        g.hot.push_run(
            Cand::make((~heat_bits(u.heat) & 0xffffffffULL) << 32 | (~u.last_access & 0xffffffffU),
                       u.range.start, u.node, t, pages),
            n, stride);
      }
    };
    // A chunk of pages with their own states whose parts' bounds (PagePack::Part:
    // the pages that share a node and flags) say that none yields a candidate
    // (GroupRules::yields_none) is taken as seen, its pages unvisited: only its
    // DRAM use counts. The plan is the same as with every page visited; the
    // scan's cost follows the chunks that changed or aged.
    const auto skip = [&](std::uint64_t, const PagePack& p) {
      bool none = true;
      std::uint64_t dram_pages = 0;
      p.for_each_part([&](const PagePack::Part& part) {
        none = none && rules.yields_none(part.node, part.earliest_access, part.heat_bound,
                                         part.flags, take_warm);
        if ((part.flags & HeatState::kTracked) != 0 && rules.in_dram(part.node)) {
          dram_pages += part.pages;
        }
      });
      if (none) dram_use += dram_pages * kPageSize;
      return none;
    };
    tv.heat->for_each_run(
        s_.now,
        [&](const HeatUnit& u, std::uint64_t n) __attribute__((always_inline)) {
          if (n == 1) {
            one(u, 1);
            return;
          }
          // A run of alike pages has one verdict, unless an exclusion or a pinned
          // range covers part of it: the verdict of the run's whole range says.
          HeatUnit whole = u;
          whole.range.end = u.range.start + n * u.range.bytes();
          if (rules.classify(whole, unseen) != Rule::kExcluded &&
              (tv.pinned.empty() || !overlaps_any(tv.pinned, whole.range))) {
            one(u, n);
            return;
          }
          HeatUnit page = u;
          for (std::uint64_t i = 0; i < n; ++i) {
            one(page, 1);
            page.range = {page.range.end, page.range.end + u.range.bytes()};
          }
        },
        skip);
    g.dram_use += dram_use;
  }

  // Takes c to `to` if the budget and the destination allow; false if not.
  bool take(const Cand& c, int to, Why why, bool demotion) {
    if (budget_out_) return false;
    Node* dst = node(to);
    Node* src = node(c.node());
    std::uint64_t bytes = c.bytes();
    bool partial = false;
    if (bytes > budget_) {
      // A region larger than what is left moves in whole huge-page-sized pieces
      // of the budget, one piece a plan: DAMON merges a cold pool into one
      // region far larger than any budget, and it must still move.
      const std::uint64_t piece = budget_ / kHugePageSize * kHugePageSize;
      if (c.pages <= kPagesPerChunk || piece == 0) {
        budget_out_ = true;
        return false;
      }
      bytes = piece;
      partial = true;
    }
    if (dst == nullptr || dst->full) return false;
    const bool room_free = dst->free >= bytes && dst->free - bytes >= s_.limits.min_free;
    bool room_fill = true;
    if (demotion) {
      const std::uint64_t used_after = dst->total - std::min(dst->total, dst->free) + bytes;
      room_fill = static_cast<long double>(used_after) <=
                  static_cast<long double>(s_.limits.cxl_fill_max) * dst->total;
    }
    if (!room_free || !room_fill) {
      if (demotion) dst->full = true;
      return false;
    }
    budget_ -= bytes;
    dst->free -= bytes;
    src->free += bytes;
    // Promotion keys are inverted (hottest first).
    const std::uint64_t key = demotion ? c.key : ~c.key;
    chosen_.push_back(Chosen{.target = c.target,
                             .start = c.start(),
                             .bytes = bytes,
                             .from = c.node(),
                             .to = static_cast<std::int16_t>(to),
                             .why = why,
                             .heat = key_heat(key),
                             .last_access = key_access(key)});
    if (partial) budget_out_ = true;
    return true;
  }

  // Demotes what the limits call for, coldest first: the group's dram_limit and
  // keep_free (any unit idle for less than demote_heat allows, warm ones too), and
  // every fast node's DRAM headroom (units idle for cold_age at least: cold and
  // cooling ones).
  void room(GroupWork& g, const std::vector<Cand>& cold) {
    const GroupPolicy& pol = g.cfg->policy;
    std::uint64_t over =
        pol.dram_limit && g.dram_use > *pol.dram_limit ? g.dram_use - *pol.dram_limit : 0;
    auto short_keep = [&](int id) -> std::uint64_t {
      const Node* n = node(id);
      return pol.keep_free && n->free < *pol.keep_free ? *pol.keep_free - n->free : 0;
    };
    g.order = ranked(g, cold);
    g.order_taken.assign(g.order.size(), false);
    for (std::size_t i = 0; i < g.order.size(); ++i) {
      const Ranked& r = g.order[i];
      const Cand& c = r.c;
      const bool limits = over > 0 || short_keep(c.node()) > 0;
      const bool headroom = r.rule != Rule::kWarm && short_of_headroom(c.node()) > 0;
      if (!limits && !headroom) continue;
      const Why why = over > 0 ? Why::kDramLimit : limits ? Why::kKeepFree : Why::kHeadroom;
      if (!take(c, g.rules.demotion_dest(c.node()), why, true)) {
        if (budget_out_) break;
        continue;
      }
      g.order_taken[i] = true;
      over -= std::min(over, c.bytes());
      g.dram_use -= c.bytes();
    }
    if (over > 0) {
      notes_.push_back(fmt::format("group {}: DRAM use is {} above dram_limit {}: {}", g.cfg->name,
                                   format_size(over), format_size(*pol.dram_limit),
                                   budget_out_ ? "migration budget exhausted"
                                               : "nothing colder than demote_heat left to demote"));
    }
  }

  // The candidates of the room pass in one coldest-first order.
  std::vector<Ranked> ranked(GroupWork& g, const std::vector<Cand>& cold) {
    std::vector<Ranked> out;
    out.reserve(cold.size());
    for (const Cand& c : cold) out.push_back({c, Rule::kCold});
    for (const Cand& c : std::move(g.cooling).sorted()) out.push_back({c, Rule::kCooling});
    // Warm: all of them under dram_limit/keep_free, in one coldest-first order with
    // the rest; else only the exchangeable ones, after every cold and cooling one.
    const bool mixed = g.rules.watermark();
    if (mixed) {
      for (const Cand& c : std::move(g.warm).sorted()) out.push_back({c, Rule::kWarm});
    }
    std::ranges::stable_sort(out, [](const Ranked& a, const Ranked& b) { return a.c < b.c; });
    if (!mixed) {
      for (const Cand& c : std::move(g.warm).sorted()) out.push_back({c, Rule::kWarm});
    }
    return out;
  }

  void headroom_notes() {
    for (std::size_t id = 0; id < nodes_.size(); ++id) {
      const std::uint64_t missing = short_of_headroom(static_cast<int>(id));
      if (missing == 0) continue;
      notes_.push_back(
          fmt::format("node {}: {} free above the kernel's watermarks, {} short of its DRAM "
                      "headroom {} plus {} "
                      "waiting for promotion: {}",
                      id, format_size(nodes_[id].free), format_size(missing),
                      format_size(nodes_[id].headroom), format_size(nodes_[id].demand),
                      budget_out_ ? "migration budget exhausted"
                                  : "nothing idle for cold_age or more left to demote"));
    }
  }

  // Promotion demand per destination node, as far as the budget reaches.
  void add_demand(const std::vector<Cand>& hot) {
    std::uint64_t budget = budget_;
    for (const Cand& c : hot) {
      if (c.bytes() > budget) break;
      budget -= c.bytes();
      Node* dst = node(promotion_dest(s_.targets[c.target], c.node()));
      if (dst != nullptr) dst->demand += c.bytes();
    }
  }

  void promote(GroupWork& g, const std::vector<Cand>& hot) {
    const GroupPolicy& pol = g.cfg->policy;
    std::size_t left = 0;
    for (const Cand& c : hot) {
      if (budget_out_) {
        ++left;
        continue;
      }
      const int to = promotion_dest(s_.targets[c.target], c.node());
      const Node* dst = node(to);
      if (dst == nullptr) continue;
      // Promotion must not undo the watermark.
      if (pol.dram_limit && g.dram_use + c.bytes() > *pol.dram_limit) {
        ++left;
        continue;
      }
      if (pol.keep_free && (dst->free < c.bytes() || dst->free - c.bytes() < *pol.keep_free)) {
        ++left;
        continue;
      }
      // Half the DRAM headroom stays for the kernel's promotions in the fault path,
      // where the kernel makes them.
      const std::uint64_t above = dst->headroom - std::min(dst->headroom, s_.limits.min_free);
      const std::uint64_t keep = s_.limits.min_free + (s_.fault_path_promotions ? above / 2 : 0);
      if (dst->free < c.bytes() + keep && !exchange(g, to, c.bytes() + keep, c.bytes())) {
        ++left;
        if (!budget_out_) waiting_bytes_ += c.bytes();
        continue;
      }
      if (take(c, to, Why::kPromote, false)) {
        g.dram_use += c.bytes();
      } else {
        ++left;
      }
    }
    if (left > 0) {
      notes_.push_back(fmt::format(
          "group {}: {} hot range(s) stay on the slow node: {}", g.cfg->name, left,
          budget_out_ ? "migration budget exhausted" : "no room in DRAM within the limits"));
    }
  }

  // Room on node `to` for a promotion of `bytes` that needs `want` free, by
  // demoting the group's warm units idle for half the cold age or more, coldest
  // first (what the room pass left of them): an exchange of pages idle for
  // seconds for one just accessed on a slow node. Only when that makes the room
  // and the budget holds the promotion too; false, with nothing taken, if not.
  bool exchange(GroupWork& g, int to, std::uint64_t want, std::uint64_t bytes) {
    Node* dst = node(to);
    const std::uint64_t deficit = want - std::min(want, dst->free);
    std::uint64_t found = 0;
    std::vector<std::size_t> pick;
    auto gone = [&](std::size_t i) {
      const Ranked& r = g.order[i];
      return r.rule != Rule::kWarm || g.order_taken[i] ||
             !g.rules.exchangeable(key_access(r.c.key));
    };
    if (auto it = g.exchange_short.find(to); it != g.exchange_short.end() && deficit > it->second) {
      return false;
    }
    while (g.exchange_from < g.order.size() && gone(g.exchange_from)) ++g.exchange_from;
    for (std::size_t i = g.exchange_from; i < g.order.size() && found < deficit; ++i) {
      const Ranked& r = g.order[i];
      if (gone(i) || r.c.node() != to) continue;
      pick.push_back(i);
      found += r.c.bytes();
    }
    if (found < deficit) {
      // Every exchangeable unit left was counted: an upper bound from now on
      // (units only leave the order, and the plan's time stands still).
      g.exchange_short[to] = found;
      return false;
    }
    if (budget_out_ || budget_ < found + bytes) return false;
    for (const std::size_t i : pick) {
      const Cand& w = g.order[i].c;
      if (!take(w, g.rules.demotion_dest(to), Why::kExchange, true)) return false;
      g.order_taken[i] = true;
      g.dram_use -= w.bytes();
    }
    return dst->free >= want;
  }

  // The cold-age pass: what the room pass left that the rules demote now
  // (GroupRules::cold_age_round, told whether the unit's node is under
  // pressure), round by round, each in rank order.
  void cold_age(GroupWork& g) {
    for (int round = 0; round < GroupRules::kColdAgeRounds; ++round) {
      for (std::size_t i = 0; i < g.order.size() && !budget_out_; ++i) {
        const Ranked& r = g.order[i];
        if (g.order_taken[i]) continue;
        const Node* n = node(r.c.node());
        if (g.rules.cold_age_round(r.rule, key_access(r.c.key),
                                   s_.targets[r.c.target].dram_reads_unseen,
                                   n != nullptr && n->pressed) != round) {
          continue;
        }
        g.order_taken[i] = take(r.c, g.rules.demotion_dest(r.c.node()), Why::kColdAge, true);
      }
    }
  }

  // What the room and cold-age passes left in DRAM that either could take (cold
  // and cooling units, coldest first): the fast path's exchanges between steps.
  void add_spare(const GroupWork& g, std::vector<SpareUnit>& out) const {
    for (std::size_t i = 0; i < g.order.size(); ++i) {
      const Ranked& r = g.order[i];
      if (g.order_taken[i]) continue;
      if (r.rule == Rule::kWarm && !g.rules.exchangeable(key_access(r.c.key))) continue;
      out.push_back(
          SpareUnit{.pid = s_.targets[r.c.target].pid, .addr = r.c.start(), .node = r.c.node()});
    }
  }

  // The idle time from which the cold-age pass demoted a unit of target idle
  // for `idle_ticks` (GroupRules::demoted_after).
  [[nodiscard]] TimeNs effective_cold_age(std::uint32_t target, std::uint32_t idle_ticks) const {
    const TargetView& tv = s_.targets[target];
    return from_tick(groups_[tv.group].rules.demoted_after(tv.dram_reads_unseen, idle_ticks));
  }

  std::string describe(const Chosen& c, std::uint64_t bytes, float max_heat,
                       std::uint32_t newest_access) {
    const TargetView& tv = s_.targets[c.target];
    const GroupConfig& g = s_.groups[tv.group];
    const std::uint32_t now_tick = to_tick(s_.now);
    const std::uint32_t idle_ticks = now_tick - std::min(now_tick, newest_access);
    const TimeNs idle = from_tick(idle_ticks);
    const std::string size = format_size(bytes);
    switch (c.why) {
      case Why::kColdAge:
        return fmt::format("idle {} >= cold age {}; heat {:.2f}/s <= demote_heat {:.2f}/s; {}",
                           format_duration(idle),
                           format_duration(effective_cold_age(c.target, idle_ticks)), max_heat,
                           g.policy.demote_heat, size);
      case Why::kDramLimit:
        return fmt::format(
            "group {} DRAM use above dram_limit {}: coldest first; heat {:.2f}/s; {}", g.name,
            format_size(*g.policy.dram_limit), max_heat, size);
      case Why::kKeepFree:
        return fmt::format("node {} free below keep_free {}: coldest first; heat {:.2f}/s; {}",
                           c.from, format_size(*g.policy.keep_free), max_heat, size);
      case Why::kHeadroom:
        return fmt::format(
            "node {} free below its DRAM headroom {} plus {} waiting for promotion: coldest "
            "first, idle {} >= cold_age {}; {}",
            c.from, format_size(nodes_[static_cast<std::size_t>(c.from)].headroom),
            format_size(nodes_[static_cast<std::size_t>(c.from)].demand), format_duration(idle),
            format_duration(*g.policy.cold_age), size);
      case Why::kExchange:
        return fmt::format(
            "node {}: room for {} waiting for promotion: coldest first, idle {} >= half the "
            "cold_age {}; {}",
            c.from, format_size(nodes_[static_cast<std::size_t>(c.from)].demand),
            format_duration(idle), format_duration(*g.policy.cold_age), size);
      case Why::kPromote:
        return fmt::format("accessed on slow node {} since it was moved there (last {} ago); {}",
                           c.from, format_duration(idle), size);
    }
    return "";
  }

  Plan finish() {
    Plan out;
    std::ranges::sort(chosen_, [](const Chosen& a, const Chosen& b) {
      return std::tie(a.target, a.start) < std::tie(b.target, b.start);
    });
    // Neighbouring units that move alike become one range.
    for (std::size_t i = 0; i < chosen_.size();) {
      const Chosen& first = chosen_[i];
      std::uint64_t end = first.start + first.bytes;
      float max_heat = first.heat;
      std::uint32_t newest = first.last_access;
      std::size_t j = i + 1;
      for (; j < chosen_.size(); ++j) {
        const Chosen& c = chosen_[j];
        if (c.target != first.target || c.start != end || c.from != first.from ||
            c.to != first.to || c.why != first.why) {
          break;
        }
        end += c.bytes;
        max_heat = std::max(max_heat, c.heat);
        newest = std::max(newest, c.last_access);
      }
      const TargetView& tv = s_.targets[first.target];
      const MoveReason reason = first.why == Why::kColdAge   ? MoveReason::kColdAge
                                : first.why == Why::kPromote ? MoveReason::kHotPromotion
                                : first.why == Why::kHeadroom || first.why == Why::kExchange
                                    ? MoveReason::kHeadroom
                                    : MoveReason::kWatermark;
      (reason == MoveReason::kHotPromotion ? out.promote_bytes : out.demote_bytes) +=
          end - first.start;
      out.moves.push_back(PlannedMove{.pid = tv.pid,
                                      .range = {first.start, end},
                                      .from_node = first.from,
                                      .to_node = first.to,
                                      .reason = reason,
                                      .heat = max_heat,
                                      .why = describe(first, end - first.start, max_heat, newest)});
      i = j;
    }
    if (budget_out_) {
      notes_.push_back(fmt::format("migration budget exhausted ({} left): the rest waits",
                                   format_size(budget_)));
    }
    for (const auto& n : nodes_) {
      if (n.full) {
        notes_.push_back(fmt::format(
            "a demotion node reached its fill limit (cxl_fill_max {:.0f}%, min_free {})",
            s_.limits.cxl_fill_max * 100, format_size(s_.limits.min_free)));
        break;
      }
    }
    out.notes = std::move(notes_);
    out.waiting_bytes = waiting_bytes_;
    return out;
  }

  const Snapshot& s_;
  const Topology& topo_;
  NodeFacts facts_;
  std::uint64_t budget_;
  bool budget_out_ = false;
  std::uint64_t waiting_bytes_ = 0;  // Plan::waiting_bytes
  std::vector<Node> nodes_;
  std::vector<GroupWork> groups_;
  std::vector<Chosen> chosen_;
  std::vector<std::string> notes_;
};

}  // namespace

Plan plan(const Snapshot& snap, std::vector<SpareUnit>* spare) {
  if (spare != nullptr) spare->clear();
  if (snap.topology == nullptr) {
    Plan p;
    p.notes.emplace_back("no topology in the snapshot: nothing planned");
    return p;
  }
  return Planner(snap).run(spare);
}

Plan plan_promotions(const Snapshot& snap, std::span<const PromotionCandidate> candidates,
                     std::span<const PromotionCandidate> spare) {
  if (snap.topology == nullptr) return {};
  return Planner(snap).run_promotions(candidates, spare);
}

}  // namespace kvtier::policy
