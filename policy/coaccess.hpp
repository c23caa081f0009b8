#pragma once
// Co-access groups (issue 36): pages of one target that page-level evidence
// (NUMA hint faults, PMU samples) found accessed on a slow node together, so
// that when the first page of a known group is touched there again, the rest
// can be promoted before they fault.
//
// Learning. Every page-level touch of a page on a slow node joins the target's
// open episode, which lasts `window` from its first touch. When it closes, its
// pages that were in no group join the one known group the episode triggered,
// or, if it triggered none or several, become a new group (two pages or more):
// a returning prefix, read whole, comes back as one episode, and what its first
// return missed joins it at the next. A group's witness is the page of it the
// last episode that touched it touched last.
//
// Trials. The loop promotes a group at its trigger (the first touch of it since
// `rearm`), except its witness, which stays on the slow node: if the witness is
// touched within the trial's deadline (the cold age), the group was read again
// and the promotion was a hit; otherwise it was wasted, and the group is
// forgotten. While promotion by group is off (GroupHitRate), the same trials
// run in the shadow (nothing moves), so the rate can recover.
//
// Decay and size. A group not seen (touched) for `idle_ttl` is forgotten, and
// trim() keeps the whole at most a given byte budget (the loop gives one byte
// per tracked 4 KiB page: issue 33's budget), forgetting the least recently
// seen first.

#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <unordered_map>
#include <utility>
#include <vector>

#include "policy/types.hpp"

namespace kvtier::policy {

using CoGroupId = std::uint32_t;

struct CoAccessParams {
  TimeNs window = 1'000'000'000;                // an episode's touches: this close to its first
  std::uint64_t max_group_bytes = 64ULL << 20;  // a group's pages, at most
  TimeNs idle_ttl = 600LL * 1'000'000'000;      // forgotten when not touched this long
};

// Bytes judged since the last take_judged().
struct GroupJudged {
  std::uint64_t hit_bytes = 0;
  std::uint64_t wasted_bytes = 0;
  std::uint64_t hits = 0;
  std::uint64_t wastes = 0;
};

class CoAccessGroups {
 public:
  explicit CoAccessGroups(CoAccessParams p = {}) : p_(p) {}

  // A page-level touch of the page at `page` on a slow node at `t`. Returns the
  // group this touch triggers: a known group's first touch since `rearm` ago.
  // A touch of a running trial's witness judges the trial a hit.
  std::optional<CoGroupId> touch(std::uint64_t page, TimeNs t, TimeNs rearm);
  // Closes the episodes whose window ended by `now` (see above), and judges the
  // trials whose deadline passed as wasted.
  void settle(TimeNs now);
  // A trial of group `g` (promoted, or in the shadow): `bytes` at stake, judged
  // by its witness until `deadline`.
  void start_trial(CoGroupId g, std::uint64_t bytes, TimeNs deadline);
  GroupJudged take_judged() { return std::exchange(judged_, GroupJudged{}); }

  // The group's pages as sorted, disjoint ranges; empty when it is not known.
  [[nodiscard]] std::span<const AddrRange> ranges(CoGroupId g) const;
  [[nodiscard]] std::uint64_t witness(CoGroupId g) const;
  // The group of the page at `addr`, if any.
  [[nodiscard]] std::optional<CoGroupId> group_of(std::uint64_t addr) const;

  // Forgets groups idle longer than idle_ttl, then the least recently seen
  // while memory_bytes() > budget.
  void trim(TimeNs now, std::uint64_t budget);
  // Forgets every group with a page in `range` (unmapped memory).
  void forget_range(AddrRange range);
  void forget(CoGroupId g);

  [[nodiscard]] std::size_t size() const { return groups_.size(); }
  [[nodiscard]] std::size_t trials() const { return trials_.size(); }
  // What the groups, their index, the open episodes and the trials hold, about.
  [[nodiscard]] std::uint64_t memory_bytes() const;

 private:
  struct Group {
    std::vector<AddrRange> runs;  // sorted, disjoint
    std::uint64_t witness = 0;
    std::uint64_t bytes = 0;
    TimeNs last_seen = 0;
    std::optional<TimeNs> last_trigger;  // nullopt: never triggered
  };
  struct Episode {
    TimeNs start = 0;
    std::vector<std::uint64_t> pages;  // in the order touched
    std::vector<CoGroupId> triggered;  // known groups it triggered
  };
  struct Trial {
    CoGroupId group = 0;
    std::uint64_t bytes = 0;
    TimeNs deadline = 0;
  };

  void close();
  void add_pages(CoGroupId g, std::span<const std::uint64_t> pages);

  CoAccessParams p_;
  CoGroupId next_id_ = 1;
  std::unordered_map<CoGroupId, Group> groups_;
  std::map<std::uint64_t, std::pair<std::uint64_t, CoGroupId>> index_;  // start -> end, group
  Episode episode_;
  std::unordered_map<std::uint64_t, Trial> trials_;  // by witness page
  GroupJudged judged_;
};

// The share of the bytes promoted by group that were hits, over the last
// judgments (each weighs 1/kWindow less at every new one), and whether
// promotion by group runs: until kMinJudged trials are judged it does; after,
// while the rate is at least `min_rate`. Trials go on in the shadow while it
// is off, so a workload that turns regular turns it on again.
class GroupHitRate {
 public:
  static constexpr double kWindow = 32.0;
  static constexpr std::uint64_t kMinJudged = 8;
  explicit GroupHitRate(double min_rate) : min_rate_(min_rate) {}
  void add(const GroupJudged& j);
  [[nodiscard]] double rate() const;  // 1 when nothing was judged
  [[nodiscard]] bool on() const { return judged_ < kMinJudged || rate() >= min_rate_; }
  [[nodiscard]] std::uint64_t judged() const { return judged_; }
  [[nodiscard]] double min_rate() const { return min_rate_; }

 private:
  double min_rate_;
  double hit_ = 0;
  double all_ = 0;
  std::uint64_t judged_ = 0;
};

}  // namespace kvtier::policy
