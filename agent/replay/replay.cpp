#include "agent/replay/replay.hpp"

#include <stdlib.h>  // mkdtemp

#include <fmt/format.h>
#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <utility>
#include <variant>

#include "agent/host/availability.hpp"
#include "agent/host/host_paths.hpp"
#include "agent/host/huge_pages.hpp"
#include "agent/host/move_pages_call.hpp"
#include "agent/host/residency.hpp"
#include "agent/host/sysfs.hpp"
#include "agent/loop/controller.hpp"
#include "agent/loop/loop_state.hpp"
#include "agent/loop/recording.hpp"
#include "agent/movers/mover.hpp"
#include "agent/replay/truth.hpp"
#include "agent/sources/hotness_source.hpp"
#include "agent/telemetry/telemetry.hpp"
#include "policy/config.hpp"
#include "policy/error.hpp"
#include "policy/topology.hpp"
#include "policy/types.hpp"

namespace kvtier::agent {
namespace {

namespace fs = std::filesystem;

template <class F>
void for_pages(AddrRange r, F&& f) {
  for (std::uint64_t a = r.start & ~(kPageSize - 1); a < r.end; a += kPageSize) f(a);
}

// What the replay knows of the host: the recorded placement (R: as the
// residency answers and the recorded moves say) and the replay's (S).
struct SimHost {
  PageNodes recorded;
  PageNodes replayed;
  std::map<Pid, std::vector<std::uint64_t>> huge;  // the last full read's huge blocks
  policy::Topology topology;                       // as recorded at this step
  std::vector<RecMove> expected;                   // this step's recorded moves
  std::size_t next_expected = 0;
  // Where in the recorded move next_expected the replay is, when the replay
  // hands the mover the same moves in other pieces (ReplayMover::as_pieces).
  std::size_t expected_range = 0;
  std::uint64_t expected_off = 0;
  bool moves_as_recorded = true;

  // A residency answer: where the kernel changed a page the recording knew
  // (its own placement, a promotion in the fault path, a page freed), the
  // replay's page follows; a page the recording moved itself stays where the
  // replay put it.
  void answer(const RecResidency& r) {
    for (const auto& run : r.runs) {
      for_pages(run.range, [&](std::uint64_t a) {
        if (recorded.get(r.pid, a) != run.node) {
          recorded.set(r.pid, a, run.node);
          replayed.set(r.pid, a, run.node);
        }
      });
    }
    if (r.full) huge[r.pid] = r.huge_blocks;
  }

  // A recorded move that moved every page: the recording's placement follows.
  void recorded_move(const RecMove& m) {
    if (m.stats.moved != m.stats.requested) return;  // which pages stayed: the next read says
    for (const auto& r : m.ranges) {
      for_pages(r, [&](std::uint64_t a) {
        if (recorded.get(m.pid, a) >= 0) recorded.set(m.pid, a, m.to_node);
      });
    }
  }

  [[nodiscard]] bool dram(int node) const {
    const auto* n = topology.find(node);
    return n == nullptr || n->has_cpus();
  }
  [[nodiscard]] IsDram is_dram() const {
    return [this](int node) { return dram(node); };
  }
  void log_changes(bool on) {
    for (PageNodes* p : {&recorded, &replayed}) {
      p->logging = on;
      if (on) p->changes.clear();
    }
  }
  void tally(const PageNodes& p, const AccessSample& s, double& on_dram, double& on_slow) const {
    const int node = p.get(s.pid, s.addr);
    if (node < 0) return;
    (dram(node) ? on_dram : on_slow) += s.weight;
  }

  [[nodiscard]] TierBytes tiers(const PageNodes& p) const {
    TierBytes out;
    for (const auto& [node, bytes] : p.bytes()) {
      const auto b = static_cast<std::uint64_t>(std::max<std::int64_t>(bytes, 0));
      (dram(node) ? out.dram : out.slow) += b;
    }
    return out;
  }

  // The recorded topology, with free memory moved by what the replay placed differently.
  [[nodiscard]] policy::Topology adjusted_topology() const {
    policy::Topology t = topology;
    for (auto& n : t.nodes) {
      auto at = [&](const PageNodes& p) {
        auto it = p.bytes().find(n.id);
        return it == p.bytes().end() ? std::int64_t{0} : it->second;
      };
      const std::int64_t free =
          static_cast<std::int64_t>(n.mem_free_bytes) + at(recorded) - at(replayed);
      n.mem_free_bytes = static_cast<std::uint64_t>(
          std::clamp<std::int64_t>(free, 0, static_cast<std::int64_t>(n.mem_total_bytes)));
    }
    return t;
  }
};

class ReplaySource final : public HotnessSource {
 public:
  explicit ReplaySource(SourceKind kind) : kind_(kind) {}
  [[nodiscard]] SourceKind kind() const override { return kind_; }
  [[nodiscard]] Availability probe() const override { return available("recorded"); }
  Result<void> start() override {
    stopped_ = false;
    return {};
  }
  Result<void> set_targets(std::span<const Pid> /*pids*/) override { return {}; }
  Result<void> collect(TimeNs /*now*/, SourceBatch& out) override {
    for (auto& b : pending) {
      out.samples.insert(out.samples.end(), b.samples.begin(), b.samples.end());
      out.regions.insert(out.regions.end(), b.regions.begin(), b.regions.end());
    }
    pending.clear();
    return {};
  }
  // Stopped (DAMON standing by): the recorded batches go nowhere.
  void stop() override {
    stopped_ = true;
    pending.clear();
  }
  [[nodiscard]] bool stopped() const { return stopped_; }

  std::vector<SourceBatch> pending;

 private:
  SourceKind kind_;
  bool stopped_ = false;
};

// Moves pages of the simulated host. The very move the recording made does
// what it did; any other moves every present page.
class ReplayMover final : public Mover {
 public:
  explicit ReplayMover(SimHost& host) : host_(host) {}
  [[nodiscard]] std::string_view name() const override { return "replay"; }
  MoveStats move(Pid pid, std::span<const AddrRange> ranges, int to_node) override {
    return move_located(pid, ranges, to_node, {});
  }
  MoveStats move_located(Pid pid, std::span<const AddrRange> ranges, int to_node,
                         std::span<const std::uint64_t> /*huge*/) override {
    if (host_.next_expected < host_.expected.size() && host_.expected_range == 0 &&
        host_.expected_off == 0) {
      const RecMove& e = host_.expected[host_.next_expected];
      if (e.pid == pid && e.to_node == to_node && std::ranges::equal(e.ranges, ranges)) {
        ++host_.next_expected;
        if (e.stats.moved == e.stats.requested) place(pid, ranges, to_node);
        return e.stats;
      }
    }
    if (auto st = as_pieces(pid, ranges, to_node)) return *st;
    host_.moves_as_recorded = false;
    MoveStats st;
    for (const auto& r : ranges) {
      for_pages(r, [&](std::uint64_t a) {
        ++st.requested;
        const int n = host_.replayed.get(pid, a);
        if (n < 0) {
          ++st.not_present;
        } else if (n == to_node) {
          ++st.already_there;
        } else {
          ++st.moved;
          st.bytes_moved += kPageSize;
          host_.replayed.set(pid, a, to_node);
        }
      });
    }
    st.calls = 1;
    return st;
  }

 private:
  // The same pages, to the same node, as the recorded moves from where the
  // replay is, cut into other pieces (a recording whose step handed the mover
  // its plan whole, replayed by one that hands it 4 MiB at a time, or the
  // other way round), where every recorded move among them moved all it was
  // asked to: they moved as recorded.
  std::optional<MoveStats> as_pieces(Pid pid, std::span<const AddrRange> ranges, int to_node) {
    std::size_t call = host_.next_expected;
    std::size_t idx = host_.expected_range;
    std::uint64_t off = host_.expected_off;
    std::uint64_t bytes = 0;
    for (const AddrRange& r : ranges) {
      for (std::uint64_t a = r.start; a < r.end;) {
        if (call >= host_.expected.size()) return std::nullopt;
        const RecMove& e = host_.expected[call];
        if (e.pid != pid || e.to_node != to_node || e.stats.moved != e.stats.requested ||
            idx >= e.ranges.size() || e.ranges[idx].start + off != a) {
          return std::nullopt;
        }
        const std::uint64_t n = std::min(e.ranges[idx].end, r.end) - a;
        a += n;
        off += n;
        bytes += n;
        if (e.ranges[idx].start + off == e.ranges[idx].end) {
          off = 0;
          if (++idx == e.ranges.size()) {
            idx = 0;
            ++call;
          }
        }
      }
    }
    host_.next_expected = call;
    host_.expected_range = idx;
    host_.expected_off = off;
    place(pid, ranges, to_node);
    MoveStats st;
    st.requested = st.moved = bytes / kPageSize;
    st.bytes_moved = bytes;
    st.calls = 1;
    return st;
  }

  void place(Pid pid, std::span<const AddrRange> ranges, int to_node) {
    for (const auto& r : ranges) {
      for_pages(r, [&](std::uint64_t a) {
        if (host_.replayed.get(pid, a) >= 0) host_.replayed.set(pid, a, to_node);
      });
    }
  }
  SimHost& host_;
};

class ReplayHugePages final : public HugePageProbe {
 public:
  explicit ReplayHugePages(const SimHost& host) : host_(host) {}
  Result<std::vector<std::uint64_t>> huge_blocks(Pid pid, AddrRange range) override {
    std::vector<std::uint64_t> out;
    auto it = host_.huge.find(pid);
    if (it == host_.huge.end()) return out;
    for (const std::uint64_t b : it->second) {
      if (b + kHugePageSize > range.start && b < range.end) out.push_back(b);
    }
    return out;
  }

 private:
  const SimHost& host_;
};

// A /proc with the recorded targets only: what the config's selectors and the
// mapping tracker read.
class ProcTree {
 public:
  ProcTree() {
    // mkdtemp fills in the X's.
    std::string tmpl = (temp_dir() / "kvtier-replay-XXXXXX").string();
    if (mkdtemp(tmpl.data()) == nullptr) {
      error = fmt::format("{}: cannot create: {}", tmpl, errno_text(errno));
      return;
    }
    root = tmpl;
    fs::create_directories(root / "proc");
    fs::create_directories(root / "sys");
  }
  ~ProcTree() {
    std::error_code ec;
    if (!root.empty()) fs::remove_all(root, ec);
  }
  ProcTree(const ProcTree&) = delete;
  ProcTree& operator=(const ProcTree&) = delete;

  void write(const std::map<Pid, RecTarget>& targets, const std::set<Pid>& live) const {
    std::error_code ec;
    for (const auto& entry : fs::directory_iterator(root / "proc", ec)) {
      fs::remove_all(entry.path(), ec);
    }
    for (const Pid pid : live) {
      auto it = targets.find(pid);
      if (it == targets.end()) continue;
      const RecTarget& t = it->second;
      const fs::path dir = root / "proc" / std::to_string(pid);
      fs::create_directories(dir);
      std::ofstream(dir / "comm") << t.info.comm << '\n';
      std::ofstream(dir / "cmdline") << t.info.cmdline;
      if (!t.info.cgroup.empty()) std::ofstream(dir / "cgroup") << "0::" << t.info.cgroup << '\n';
      if (!t.info.exe.empty()) fs::create_symlink(t.info.exe, dir / "exe", ec);
      // The thread count, as the daemon read it (recordings before version 3: unknown).
      if (t.threads > 0) std::ofstream(dir / "status") << "Threads:\t" << t.threads << '\n';
      std::ofstream maps(dir / "maps");
      for (const auto& v : t.vmas)
        maps << fmt::format("{:x}-{:x} rw-p 00000000 00:00 0\n", v.start, v.end);
    }
  }

  fs::path root;
  std::string error;
};

// What one recorded step gives the replay before it runs: the host's state
// (topology, residency answers, the moves to expect), the targets, the batches.
struct StepInputs {
  const RecPlan* plan = nullptr;
  bool tree_changed = false;
};

StepInputs take_inputs(std::vector<Record>::const_iterator begin,
                       std::vector<Record>::const_iterator end, SimHost& host,
                       const std::vector<ReplaySource*>& sources, std::map<Pid, RecTarget>& targets,
                       std::set<Pid>& live) {
  StepInputs in;
  host.expected.clear();
  host.next_expected = 0;
  host.expected_range = 0;
  host.expected_off = 0;
  host.moves_as_recorded = true;
  for (auto r = begin; r != end; ++r) {
    if (const auto* topo = std::get_if<RecTopology>(&*r)) {
      host.topology = topo->topology;
    } else if (const auto* tgt = std::get_if<RecTarget>(&*r)) {
      targets[tgt->info.pid] = *tgt;
      in.tree_changed = true;
    } else if (const auto* pids = std::get_if<RecTargets>(&*r)) {
      std::set<Pid> now_live(pids->pids.begin(), pids->pids.end());
      in.tree_changed |= now_live != live;
      live = std::move(now_live);
    } else if (const auto* b = std::get_if<RecBatch>(&*r)) {
      if (b->source < sources.size() && !sources[b->source]->stopped()) {
        sources[b->source]->pending.push_back(b->batch);
      }
    } else if (const auto* res = std::get_if<RecResidency>(&*r)) {
      host.answer(*res);
    } else if (const auto* p = std::get_if<RecPlan>(&*r)) {
      in.plan = p;
    } else if (const auto* m = std::get_if<RecMove>(&*r)) {
      host.expected.push_back(*m);
    }
  }
  return in;
}

std::uint64_t demoted_total(const LoopState& s) {
  std::uint64_t b = 0;
  for (const auto& f : s.feedback) b += f.demoted_bytes;
  return b;
}
std::uint64_t promoted_total(const LoopState& s) {
  std::uint64_t b = 0;
  for (const auto& f : s.feedback) b += f.promoted_bytes;
  return b;
}

// The step's samples, on DRAM or the slow tier as each placement had them before the step.
void tally_samples(const SimHost& host, const std::vector<ReplaySource*>& sources,
                   ReplayStep& out) {
  for (const ReplaySource* src : sources) {
    for (const auto& b : src->pending) {
      for (const auto& smp : b.samples) {
        host.tally(host.replayed, smp, out.sampled_dram, out.sampled_slow);
        host.tally(host.recorded, smp, out.rec_sampled_dram, out.rec_sampled_slow);
      }
    }
  }
}

// The truth's windows up to `until`, read with each placement as it is now.
void score_windows(TruthIndex& truth, const SimHost& host, TimeNs until, ReplayStep& out) {
  const IsDram dram = host.is_dram();
  for (const RecAccesses* w : truth.take_until(until)) {
    TruthIndex::score_reads(*w, host.replayed, dram, out.truth);
    TruthIndex::score_reads(*w, host.recorded, dram, out.rec_truth);
  }
}

// This step's demotions, and at a step (not a tick) the placement it left, for each placement.
void score_step(const TruthIndex& truth, const SimHost& host, const RecStep& step,
                ReplayStep& out) {
  const IsDram dram = host.is_dram();
  truth.score_demotions(host.replayed.changes, step.now, dram, out.truth);
  truth.score_demotions(host.recorded.changes, step.now, dram, out.rec_truth);
  if (step.kind == StepKind::kStep) {
    truth.score_placement(host.replayed, step.now, dram, out.truth);
    truth.score_placement(host.recorded, step.now, dram, out.rec_truth);
  }
}

// Reads after the last step met the placement it left: added to the last step.
void score_tail(TruthIndex& truth, const SimHost& host, ReplayRun& run) {
  if (run.steps.empty()) return;
  ReplayStep tail;
  score_windows(truth, host, ~TimeNs{0}, tail);
  run.steps.back().truth.add(tail.truth);
  run.steps.back().rec_truth.add(tail.rec_truth);
  run.truth.add(tail.truth);
  run.rec_truth.add(tail.rec_truth);
}

void add_step(ReplayRun& run, const ReplayStep& out) {
  run.demoted_bytes += out.demoted_bytes;
  run.promoted_bytes += out.promoted_bytes;
  run.rec_demoted_bytes += out.rec_demoted_bytes;
  run.rec_promoted_bytes += out.rec_promoted_bytes;
  run.steps_as_recorded += out.plan_as_recorded ? 1 : 0;
  run.sampled_dram += out.sampled_dram;
  run.sampled_slow += out.sampled_slow;
  run.rec_sampled_dram += out.rec_sampled_dram;
  run.rec_sampled_slow += out.rec_sampled_slow;
  run.truth.add(out.truth);
  run.rec_truth.add(out.rec_truth);
  run.steps.push_back(out);
}

}  // namespace

// The Controller's pieces: the recorded host, sources and the simulated kernel.
ControllerDeps replay_deps(SimHost& host, const ProcTree& tree, const RecStart& start,
                           std::vector<ReplaySource*>& sources) {
  ControllerDeps deps{
      .paths = HostPaths::under(tree.root.string()),
      .residency = ResidencyReader(
          [&host](Pid pid, std::span<void*> pages, const int* nodes, std::span<int> status,
                  int /*flags*/) -> MovePagesResult {
            if (nodes != nullptr) return {-1, EINVAL};
            for (std::size_t i = 0; i < pages.size(); ++i) {
              const int n = host.replayed.get(pid, reinterpret_cast<std::uint64_t>(pages[i]));
              status[i] = n >= 0 ? n : -ENOENT;
            }
            return {0, 0};
          },
          4096, std::make_shared<ReplayHugePages>(host)),
      .self = 0,
      .topology = [&host]() -> Result<policy::Topology> { return host.adjusted_topology(); }};
  for (const SourceKind k : start.sources) {
    auto s = std::make_unique<ReplaySource>(k);
    sources.push_back(s.get());
    deps.sources.push_back({.source = std::move(s), .reason = "recorded"});
  }
  if (start.mover) deps.mover = std::make_unique<ReplayMover>(host);
  return deps;
}

Result<ReplayRun> replay(const Recording& recording, const policy::CompiledConfig& config,
                         const TruthInput& truth_in) {
  const auto& recs = recording.records;
  auto first = std::ranges::find_if(
      recs, [](const Record& r) { return std::holds_alternative<RecStart>(r); });
  if (first == recs.end())
    return fail("the recording has no start record (not a kvtierd recording?)");
  const RecStart& start = std::get<RecStart>(*first);

  ProcTree tree;
  if (!tree.error.empty()) return fail(tree.error);
  SimHost host;
  std::vector<ReplaySource*> sources;
  ControllerDeps deps = replay_deps(host, tree, start, sources);
  Controller controller(config, std::move(deps), start.now);
  Telemetry telemetry;

  ReplayRun run{.note = recording.note};
  TruthIndex truth(truth_in.windows, truth_in.cold_age);
  run.has_truth = !truth.empty();
  run.truth_cold_age = truth_in.cold_age;
  std::map<Pid, RecTarget> targets;
  std::set<Pid> live;
  TimeNs prev_now = start.now;
  for (auto it = std::next(first); it != recs.end();) {
    if (!std::holds_alternative<RecStep>(*it)) {
      ++it;
      continue;
    }
    const RecStep step = std::get<RecStep>(*it);
    auto end = std::find_if(std::next(it), recs.end(), [](const Record& r) {
      return std::holds_alternative<RecStep>(r) || std::holds_alternative<RecStart>(r);
    });
    ReplayStep out{.now = step.now, .kind = step.kind};
    // The reads since the last step met the placement the last step left, and what the
    // kernel moved meanwhile: this step's residency answers say what, not when; it is taken
    // as done half-way.
    score_windows(truth, host, prev_now + (step.now - prev_now) / 2, out);
    const StepInputs in = take_inputs(std::next(it), end, host, sources, targets, live);
    if (in.tree_changed) tree.write(targets, live);
    score_windows(truth, host, step.now, out);
    prev_now = step.now;

    tally_samples(host, sources, out);
    const std::uint64_t demoted0 = demoted_total(controller.state());
    const std::uint64_t promoted0 = promoted_total(controller.state());
    const StepContext ctx{.now = step.now, .paused = step.paused};
    const std::size_t moves0 = host.expected.size();
    host.log_changes(true);
    if (step.kind == StepKind::kStep) {
      if (auto ok = controller.step(ctx, telemetry); !ok) {
        return fail(fmt::format("replaying the step at {} ns: {}", step.now, ok.error().message));
      }
      const auto bytes = encode(RecPlan{.plan = controller.state().last_plan});
      run.plan_bytes.insert(run.plan_bytes.end(), bytes.begin(), bytes.end());
      out.plan_as_recorded = in.plan != nullptr && encode(*in.plan) == bytes;
    } else {
      if (auto ok = controller.promote_step(ctx, telemetry); !ok) {
        return fail(
            fmt::format("replaying the promotion tick at {} ns: {}", step.now, ok.error().message));
      }
    }
    out.plan_as_recorded =
        out.plan_as_recorded && host.moves_as_recorded && host.next_expected == moves0;
    for (const auto& m : host.expected) {
      host.recorded_move(m);
      (m.demotion ? out.rec_demoted_bytes : out.rec_promoted_bytes) += m.stats.bytes_moved;
    }
    host.log_changes(false);
    if (run.has_truth) score_step(truth, host, step, out);
    out.demoted_bytes = demoted_total(controller.state()) - demoted0;
    out.promoted_bytes = promoted_total(controller.state()) - promoted0;
    out.placed = host.tiers(host.replayed);
    out.rec_placed = host.tiers(host.recorded);
    add_step(run, out);
    it = end;
  }
  score_tail(truth, host, run);
  return run;
}

TimeNs truth_cold_age(const Recording& recording, const std::vector<RecAccesses>& windows,
                      const policy::CompiledConfig& config) {
  constexpr TimeNs kDefault = 10'000'000'000;
  for (const auto& w : windows) {
    for (const auto& r : recording.records) {
      const auto* t = std::get_if<RecTarget>(&r);
      if (t == nullptr || t->info.pid != w.pid) continue;
      const auto g = config.group_of(t->info);
      if (!g) continue;
      return config.config.groups[*g].policy.cold_age.value_or(kDefault);
    }
  }
  return kDefault;
}

}  // namespace kvtier::agent
