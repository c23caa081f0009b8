// kvtier_oracle: the benchmark's ceiling. It places kvsim's KV blocks from kvsim's own ground
// truth (the --live-truth file kvsim keeps up to date), so it knows exactly which blocks are
// hot; what it does not have is more than any agent has: the same migration budget as the
// kvtier mode (a token bucket of --rate and --burst, as kvtierd's), the same free-memory floor
// on the fast node, the same mover (kvtier's MovePagesMover: batched move_pages(2)). What it
// decides is in oracle_plan.hpp. Its own CPU time is reported, and the benchmark keeps it out of
// the figures.
//
//   kvtier_oracle LIVE_TRUTH [--cold-age 10s] [--rate 128MiB/s] [--burst 256MiB]
//                 [--interval 1s] [--duration S] [--fast-node 0] [--slow-node 1]
//                 [--min-free 16MiB] [--batch-pages 1024]
//
// Output, JSON lines on stdout:
//   {"event":"start","pid","pool":[s,e],"blocks","tensors","chunk_bytes",settings...}
//   {"event":"cycle","i","t_ns","hot_blocks","cold_blocks","misplaced_hot_bytes",
//    "misplaced_cold_bytes","promote_bytes","demote_bytes","budget_bytes","room_bytes",
//    "budget_limited","room_limited","moved_to_fast_pages","moved_to_slow_pages",
//    "unmoved_pages" (planned but not moved: busy, no memory, ...),"backlog_bytes"
//    (misplaced after the cycle: not planned, or planned and not moved),"t_end_ns" (moves done),
//    "query_ms","move_ms"}
//   {"event":"end","reason","cycles","moved_to_fast_pages","moved_to_slow_pages",
//    "unmoved_pages","move_stats":{..},"cpu_s"}
// Exit status: 0 (the target exited or the duration passed), 1 error, 2 usage.

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cerrno>
#include <csignal>
#include <ctime>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "agent/host/clock.hpp"
#include "agent/host/move_pages_call.hpp"
#include "agent/host/topology_reader.hpp"
#include "agent/movers/move_pages_mover.hpp"
#include "bench/kvsim/live_truth.hpp"
#include "bench/main_guard.hpp"
#include "bench/oracle/oracle_plan.hpp"
#include "policy/budget.hpp"
#include "policy/config.hpp"
#include "policy/units.hpp"

namespace {

namespace kb = kvtier::bench;
namespace ka = kvtier::agent;
namespace kp = kvtier::policy;
using Json = nlohmann::ordered_json;
using kvtier::AddrRange;
using kvtier::kPageSize;
using kvtier::TimeNs;

volatile std::sig_atomic_t g_stop = 0;
extern "C" void on_stop(int /*sig*/) {
  g_stop = 1;
}

struct Options {
  std::string live_truth;
  std::string cold_age = "10s";
  std::string rate = kp::format_size(kp::LimitsConfig{}.migrate_rate) + "/s";
  std::string burst = kp::format_size(kp::LimitsConfig{}.migrate_burst);
  std::string interval = "1s";
  double duration_s = 0;
  int fast_node = 0;
  int slow_node = 1;
  std::string min_free = "16MiB";
  std::uint32_t batch_pages = kp::MoverConfig{}.batch_pages;
};

template <class T>
T need(std::expected<T, std::string> r, const std::string& what) {
  if (!r) throw std::runtime_error(fmt::format("{}: {}", what, r.error()));
  return *r;
}

template <class T>
T need(kvtier::Result<T> r) {
  if (!r) throw std::runtime_error(r.error().message);
  return std::move(*r);
}

// The live truth appears once kvsim has populated its pool; wait for it a little.
kb::LiveTruthReader open_truth(const std::string& path) {
  const TimeNs deadline = ka::monotonic_now() + 30'000'000'000ULL;
  for (;;) {
    auto r = kb::LiveTruthReader::open(path);
    if (r) return std::move(*r);
    const bool retry = r.error().code == ENOENT || r.error().code == EAGAIN;
    if (!retry || ka::monotonic_now() > deadline || g_stop != 0) {
      throw std::runtime_error(r.error().message);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

std::uint64_t node_free_bytes(const kp::Topology& topo, int node) {
  const kp::NumaNode* n = topo.find(node);
  return n != nullptr ? n->mem_free_bytes : 0;
}

class Oracle {
 public:
  Oracle(const Options& o, kb::LiveTruthReader truth)
      : o_(o),
        truth_(std::move(truth)),
        h_(truth_.header()),
        cold_age_(need(kp::parse_duration(o.cold_age), "--cold-age")),
        interval_(need(kp::parse_duration(o.interval), "--interval")),
        min_free_(need(kp::parse_size(o.min_free), "--min-free")),
        rate_(need(kp::parse_rate(o.rate), "--rate")),
        burst_(need(kp::parse_size(o.burst), "--burst")),
        bucket_(rate_, burst_, ka::monotonic_now()),
        // kvtierd's mover, except that a node found full (ENOMEM) is tried again at the next
        // cycle rather than after a minute: the plan already bounds promotions by the room
        // node 0 has, and a ceiling must not sit out a minute of promotions. The budget is
        // bucket_, as in kvtierd.
        mover_(ka::MovePagesConfig{.batch_units = o.batch_pages, .node_full_retry_ns = interval_}),
        query_(ka::system_move_pages()) {
    if (h_.chunk_bytes % kPageSize != 0) {
      throw std::runtime_error(fmt::format(
          "{}: chunks of {} bytes are not whole pages; the oracle moves whole blocks and needs "
          "chunks of a multiple of {} bytes (a larger --kv-budget or model)",
          o.live_truth, h_.chunk_bytes, kPageSize));
    }
    if (o.fast_node == o.slow_node) {
      throw std::runtime_error(
          fmt::format("--fast-node and --slow-node are both {}; give two nodes", o.fast_node));
    }
    const kp::Topology topo = need(ka::read_topology(ka::HostPaths{}));
    for (int n : {o.fast_node, o.slow_node}) {
      if (topo.find(n) == nullptr) {
        throw std::runtime_error(fmt::format(
            "NUMA node {} does not exist on this host (--fast-node {}, --slow-node {}); the "
            "oracle needs both (run it in the tiered guest, scripts/vm/run)",
            n, o.fast_node, o.slow_node));
      }
    }
    pages_per_chunk_ = h_.chunk_bytes / kPageSize;
  }

  // One cycle; false once the target is gone.
  bool cycle(std::uint64_t i) {
    const TimeNs now = ka::monotonic_now();
    bucket_.refill(now);
    truth_.read(times_);
    const TimeNs q0 = ka::monotonic_now();
    if (!query_pool()) return false;
    const TimeNs q1 = ka::monotonic_now();

    const auto fast = static_cast<int>(o_.fast_node);
    const auto slow = static_cast<int>(o_.slow_node);
    blocks_.assign(h_.blocks, kb::OracleBlock{});
    for (std::uint32_t b = 0; b < h_.blocks; ++b) {
      kb::OracleBlock& k = blocks_[b];
      k.last_access = times_[b];
      for (std::uint32_t t = 0; t < h_.tensors; ++t) {
        const std::uint64_t first = (t * h_.tensor_bytes + b * h_.chunk_bytes) / kPageSize;
        for (std::uint64_t p = first; p < first + pages_per_chunk_; ++p) {
          k.pages_fast += nodes_[p] == fast ? 1U : 0U;
          k.pages_slow += nodes_[p] == slow ? 1U : 0U;
        }
      }
    }
    const auto topo = ka::read_topology(ka::HostPaths{});
    const std::uint64_t free_fast = topo ? node_free_bytes(*topo, fast) : 0;
    const std::uint64_t room = free_fast > min_free_ ? free_fast - min_free_ : 0;
    const std::uint64_t budget = bucket_.available();
    const kb::OraclePlan plan = kb::plan_oracle(
        blocks_,
        kb::OracleLimits{
            .now = now, .cold_age_ns = cold_age_, .budget_bytes = budget, .fast_room_bytes = room});

    // Consecutive moves the same way go to the mover together.
    std::uint64_t to_fast = 0;
    std::uint64_t to_slow = 0;
    std::uint64_t unmoved = 0;
    bool gone = false;
    std::size_t k = 0;
    while (k < plan.moves.size() && !gone) {
      const bool dir = plan.moves[k].to_fast;
      ranges_.clear();
      for (; k < plan.moves.size() && plan.moves[k].to_fast == dir; ++k) {
        add_block_ranges(plan.moves[k].block);
      }
      const kvtier::MoveStats st =
          mover_.move(static_cast<kvtier::Pid>(h_.pid), ranges_, dir ? fast : slow);
      (dir ? to_fast : to_slow) += st.moved;
      // Every page of these blocks belongs on the node; those not there now are owed.
      unmoved += st.requested - st.moved - st.already_there;
      bucket_.consume(std::min(st.bytes_moved, bucket_.available()));
      totals_ += st;
      gone = st.gone > 0;
    }
    const TimeNs q2 = ka::monotonic_now();
    total_fast_ += to_fast;
    total_slow_ += to_slow;
    total_unmoved_ += unmoved;
    std::cout << Json{{"event", "cycle"},
                      {"i", i},
                      {"t_ns", now},
                      {"hot_blocks", plan.hot_blocks},
                      {"cold_blocks", plan.cold_blocks},
                      {"misplaced_hot_bytes", plan.misplaced_hot_bytes},
                      {"misplaced_cold_bytes", plan.misplaced_cold_bytes},
                      {"promote_bytes", plan.promote_bytes},
                      {"demote_bytes", plan.demote_bytes},
                      {"budget_bytes", budget},
                      {"room_bytes", room},
                      {"budget_limited", plan.budget_limited},
                      {"room_limited", plan.room_limited},
                      {"moved_to_fast_pages", to_fast},
                      {"moved_to_slow_pages", to_slow},
                      {"unmoved_pages", unmoved},
                      {"backlog_bytes", plan.backlog_bytes() + unmoved * kPageSize},
                      {"t_end_ns", q2},
                      {"query_ms", static_cast<double>(q1 - q0) / 1e6},
                      {"move_ms", static_cast<double>(q2 - q1) / 1e6}}
                     .dump()
              << '\n'
              << std::flush;
    return !gone;
  }

  void finish(const std::string& reason, std::uint64_t cycles) const {
    std::cout << Json{{"event", "end"},
                      {"reason", reason},
                      {"cycles", cycles},
                      {"moved_to_fast_pages", total_fast_},
                      {"moved_to_slow_pages", total_slow_},
                      {"unmoved_pages", total_unmoved_},
                      {"move_stats",
                       {{"requested", totals_.requested},
                        {"moved", totals_.moved},
                        {"already_there", totals_.already_there},
                        {"busy", totals_.busy},
                        {"pinned", totals_.pinned},
                        {"not_present", totals_.not_present},
                        {"gone", totals_.gone},
                        {"no_memory", totals_.no_memory},
                        {"permission", totals_.permission},
                        {"other", totals_.other},
                        {"calls", totals_.calls}}},
                      {"cpu_s", ka::process_cpu_seconds()}}
                     .dump()
              << '\n'
              << std::flush;
  }

  [[nodiscard]] Json start_event() const {
    return Json{{"event", "start"},
                {"pid", h_.pid},
                {"pool", {h_.pool_start, h_.pool_end}},
                {"blocks", h_.blocks},
                {"tensors", h_.tensors},
                {"chunk_bytes", h_.chunk_bytes},
                {"cold_age_s", static_cast<double>(cold_age_) / 1e9},
                {"interval_s", static_cast<double>(interval_) / 1e9},
                {"rate_bytes_per_s", rate_},
                {"burst_bytes", burst_},
                {"min_free_bytes", min_free_},
                {"fast_node", o_.fast_node},
                {"slow_node", o_.slow_node},
                {"batch_pages", o_.batch_pages}};
  }
  [[nodiscard]] TimeNs interval() const { return interval_; }

 private:
  // Node (or -errno) of every page of the pool; false once the target is gone.
  bool query_pool() {
    constexpr std::size_t kBatch = 16384;
    const std::size_t n = (h_.pool_end - h_.pool_start) / kPageSize;
    nodes_.assign(n, -1);
    addrs_.resize(std::min(n, kBatch));
    for (std::size_t i = 0; i < n; i += kBatch) {
      const std::size_t m = std::min(kBatch, n - i);
      for (std::size_t j = 0; j < m; ++j) {
        // Addresses in kvsim's address space, never dereferenced here.
        addrs_[j] = reinterpret_cast<void*>(  // NOLINT(performance-no-int-to-ptr)
            h_.pool_start + (i + j) * kPageSize);
      }
      const auto r = query_(static_cast<kvtier::Pid>(h_.pid), std::span(addrs_.data(), m), nullptr,
                            std::span(nodes_.data() + i, m), 0);
      if (r.ret < 0) {
        if (r.err == ESRCH) return false;
        std::fill_n(nodes_.begin() + static_cast<std::ptrdiff_t>(i), m, -r.err);
      }
    }
    return true;
  }

  void add_block_ranges(std::uint32_t b) {
    for (std::uint32_t t = 0; t < h_.tensors; ++t) {
      const std::uint64_t s = h_.pool_start + t * h_.tensor_bytes + b * h_.chunk_bytes;
      ranges_.push_back(AddrRange{.start = s, .end = s + h_.chunk_bytes});
    }
  }

  Options o_;
  kb::LiveTruthReader truth_;
  kb::LiveTruthHeader h_;
  TimeNs cold_age_;
  TimeNs interval_;
  std::uint64_t min_free_;
  std::uint64_t rate_;
  std::uint64_t burst_;
  kp::TokenBucket bucket_;
  ka::MovePagesMover mover_;
  ka::MovePagesFn query_;
  std::uint64_t pages_per_chunk_ = 0;
  std::vector<TimeNs> times_;
  std::vector<int> nodes_;
  std::vector<void*> addrs_;
  std::vector<kb::OracleBlock> blocks_;
  std::vector<AddrRange> ranges_;
  kvtier::MoveStats totals_;
  std::uint64_t total_fast_ = 0;
  std::uint64_t total_slow_ = 0;
  std::uint64_t total_unmoved_ = 0;
};

int run(const Options& o) {
  struct sigaction sa {};
  sa.sa_handler = on_stop;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  spdlog::set_level(spdlog::level::warn);

  Oracle oracle(o, open_truth(o.live_truth));
  std::cout << oracle.start_event().dump() << '\n' << std::flush;
  const TimeNs t0 = ka::monotonic_now();
  const TimeNs stop = o.duration_s > 0 ? t0 + static_cast<TimeNs>(o.duration_s * 1e9) : 0;
  std::uint64_t i = 0;
  std::string reason = "stopped";
  for (;; ++i) {
    if (g_stop != 0) break;
    if (stop != 0 && ka::monotonic_now() >= stop) {
      reason = "duration";
      break;
    }
    if (!oracle.cycle(i)) {
      reason = "target exited";
      ++i;
      break;
    }
    const TimeNs next = t0 + (i + 1) * oracle.interval();
    const TimeNs now = ka::monotonic_now();
    if (next > now) ka::sleep_for_ns(next - now);  // a signal cuts it short
  }
  oracle.finish(reason, i);
  return 0;
}

int parse_and_run(int argc, char** argv) {
  CLI::App app{
      "kvtier_oracle: places kvsim's KV blocks from its ground truth (the benchmark's "
      "ceiling)"};
  Options o;
  app.add_option("live_truth", o.live_truth, "kvsim's --live-truth file")->required();
  app.add_option("--cold-age", o.cold_age, "Cold = not touched for this long")
      ->capture_default_str();
  app.add_option("--rate", o.rate,
                 "Migration budget (token bucket refill), as kvtier's "
                 "limits.migrate_rate")
      ->capture_default_str();
  app.add_option("--burst", o.burst, "Token bucket depth, as kvtier's limits.migrate_burst")
      ->capture_default_str();
  app.add_option("--interval", o.interval, "Time between two cycles")->capture_default_str();
  app.add_option("--duration", o.duration_s, "Stop after S seconds (0: when kvsim exits)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_option("--fast-node", o.fast_node, "The DRAM node")->capture_default_str();
  app.add_option("--slow-node", o.slow_node, "The CXL (demotion) node")->capture_default_str();
  app.add_option("--min-free", o.min_free,
                 "Free memory the fast node keeps (promotions stop there), as kvtier's "
                 "limits.min_free")
      ->capture_default_str();
  app.add_option("--batch-pages", o.batch_pages, "Pages per move_pages(2) call")
      ->capture_default_str()
      ->check(CLI::Range(1U, 1U << 20));
  app.footer("Exit status: 0 done (duration, stopped, or kvsim exited), 1 error, 2 bad usage.");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? 0 : 2;
  }
  return run(o);
}

}  // namespace

int main(int argc, char** argv) {
  return kvtier::bench::guarded_main("kvtier_oracle", 1, [&] { return parse_and_run(argc, argv); });
}
