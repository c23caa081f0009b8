// kvsim: a KV-cache workload simulator. It holds a vLLM-style paged KV cache in its own memory
// and reads and writes it the way decode does, driven by a real request trace, so that a
// tiering daemon sees the access pattern of an inference server. Every read is checked against
// a deterministic pattern; the ground truth of which blocks were touched when is written out.
//
// Output: JSON lines on stdout ({"event":"start"|"stats"|"corruption"|"injected"|"truth"|"end"}),
// stats optionally to --stats FILE. Exit status: 0 success, 1 error, 2 bad usage, 3 corruption.

#include <fmt/format.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <csignal>
#include <cstdio>
#include <ctime>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "agent/loop/recording.hpp"
#include "bench/kvsim/ground_truth.hpp"
#include "bench/kvsim/kv_pool.hpp"
#include "bench/kvsim/live_truth.hpp"
#include "bench/kvsim/model_shape.hpp"
#include "bench/kvsim/simulator.hpp"
#include "bench/kvsim/trace.hpp"
#include "policy/error.hpp"

namespace {

namespace kb = kvtier::bench;
using kvtier::TimeNs;
using Json = nlohmann::ordered_json;

constexpr int kExitOk = 0;
constexpr int kExitFailed = 1;
constexpr int kExitUsage = 2;
constexpr int kExitCorrupt = 3;

volatile std::sig_atomic_t g_dump_truth = 0;
volatile std::sig_atomic_t g_stop = 0;

extern "C" void on_usr1(int /*sig*/) {
  g_dump_truth = 1;
}
extern "C" void on_stop(int /*sig*/) {
  g_stop = 1;
}

TimeNs mono_now() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<TimeNs>(ts.tv_sec) * 1'000'000'000ULL + static_cast<TimeNs>(ts.tv_nsec);
}

void sleep_ns(TimeNs ns) {
  timespec ts{.tv_sec = static_cast<time_t>(ns / 1'000'000'000ULL),
              .tv_nsec = static_cast<long>(ns % 1'000'000'000ULL)};
  nanosleep(&ts, nullptr);  // a signal cuts it short, which is what we want
}

// Unmapping more pages than the kernel flushes one by one (33) flushes the
// whole TLB of the process. Under QEMU TCG the software TLB never evicts the
// pool's translations, so after DAMON clears a page's accessed bit the CPU
// would never set it again; real TLBs evict all the time.
void flush_own_tlb() {
  constexpr std::size_t kScratch = std::size_t{64} * 4096;
  void* p = mmap(nullptr, kScratch, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return;
  for (std::size_t off = 0; off < kScratch; off += 4096) static_cast<volatile char*>(p)[off] = 1;
  munmap(p, kScratch);
}

// The Mooncake trace the repository ships (bench/traces), by its path in the source tree
// kvsim was built from.
constexpr const char* kDefaultTrace = KVTIER_KVSIM_DEFAULT_TRACE;

struct Options {
  bool flush_tlb = false;
  std::string trace = kDefaultTrace;
  std::string trace_format;
  std::string preset = "llama3-8b";
  std::optional<std::uint32_t> layers;
  std::optional<std::uint32_t> kv_heads;
  std::optional<std::uint32_t> head_dim;
  std::string dtype;
  std::string budget = "512MiB";
  std::uint64_t capacity_tokens = 2ULL << 20;
  std::optional<std::uint32_t> layer_scale;
  std::optional<std::uint32_t> token_scale;
  double time_scale = 1.0;
  double duration_s = 0;
  bool loop = false;
  std::uint32_t max_batch = 32;
  std::uint64_t seed = 1;
  std::uint32_t lines_per_page = 4;
  bool hugepages = false;
  bool no_hugepages = false;
  bool no_populate = false;
  double decode_ms = 30;
  std::optional<double> prefill_ms;  // nullopt: decode_ms
  std::optional<double> step_ms;
  std::string truth;
  std::string live_truth;
  std::string truth_record;
  double truth_window_s = 1.0;
  std::string stats;
  double stats_interval_s = 1.0;
  std::vector<double> cold_ages{10, 30};
  std::optional<std::uint64_t> inject_after;
  std::uint32_t read_nodes_every = 0;
  double reaction_window_s = 5.0;
  std::uint32_t idle_threads = 0;
};

// Threads that only wait until kvsim ends. An inference server has many threads; kvsim's
// work runs on one. The kernel's NUMA scan leaves a single-threaded process's pages on its own
// node mapped (mm/mprotect.c), so with no other thread its reads of them cause no NUMA hint
// fault; with these, they do, as a server's would. They run nothing and take no signal.
class IdleThreads {
 public:
  explicit IdleThreads(std::uint32_t n) {
    sigset_t all;
    sigset_t old;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &old);
    threads_.reserve(n);
    for (std::uint32_t i = 0; i < n; ++i) {
      threads_.emplace_back([this] {
        std::unique_lock lock(mu_);
        cv_.wait(lock, [this] { return stop_; });
      });
    }
    pthread_sigmask(SIG_SETMASK, &old, nullptr);
  }
  ~IdleThreads() {
    {
      const std::lock_guard lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    for (auto& t : threads_) t.join();
  }
  IdleThreads(const IdleThreads&) = delete;
  IdleThreads& operator=(const IdleThreads&) = delete;

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::vector<std::thread> threads_;
};

// Fails with one line naming what to fix; exceptions stop here.
template <class T>
T need(kvtier::Result<T> r) {
  if (!r) throw std::runtime_error(r.error().message);
  return std::move(*r);
}

// move_pages(2) with no target nodes reports the node of each page (or -errno) and moves
// nothing; calling the syscall directly keeps kvsim free of libnuma.
void query_page_nodes(std::span<void* const> pages, std::span<int> nodes) {
  constexpr std::size_t kBatch = 4096;
  for (std::size_t i = 0; i < pages.size(); i += kBatch) {
    const std::size_t n = std::min(kBatch, pages.size() - i);
    // const_cast: the kernel reads the page list only.
    if (syscall(SYS_move_pages, 0, n, const_cast<void**>(pages.data() + i), nullptr,
                nodes.data() + i, 0) != 0) {
      std::fill_n(nodes.begin() + static_cast<std::ptrdiff_t>(i), n, -errno);
    }
  }
}

Json read_nodes_json(const kb::SimCounters& c, const kb::SimConfig& cfg, TimeNs query_ns) {
  Json by_node = Json::object();
  Json late_by_node = Json::object();
  for (std::size_t n = 0; n < c.read_bytes_on_node.size(); ++n) {
    by_node[std::to_string(n)] = c.read_bytes_on_node[n];
    late_by_node[std::to_string(n)] = c.late_read_bytes_on_node[n];
  }
  return Json{{"sampled_steps", c.node_sampled_steps},
              {"sampled_read_bytes", c.node_sampled_read_bytes},
              {"by_node", by_node},
              {"late_by_node", late_by_node},
              {"episode_gap_s", static_cast<double>(cfg.episode_gap) / 1e9},
              {"reaction_window_s", static_cast<double>(cfg.reaction_window) / 1e9},
              {"unplaced_bytes", c.read_bytes_unplaced},
              {"query_ms", static_cast<double>(query_ns) / 1e6}};
}

class Output {
 public:
  explicit Output(const std::string& stats_path) {
    if (!stats_path.empty()) {
      file_.open(stats_path, std::ios::out | std::ios::trunc);
      if (!file_) throw std::runtime_error(fmt::format("{}: cannot write stats", stats_path));
    }
  }
  // Start, end and corruption events go to stdout always (a driver reads the pid from there).
  static void event(const Json& j) { std::cout << j.dump() << '\n' << std::flush; }
  void stats(const Json& j) {
    if (file_.is_open()) {
      file_ << j.dump() << '\n' << std::flush;
    } else {
      event(j);
    }
  }

 private:
  std::ofstream file_;
};

Json corruption_json(const kb::CorruptionReport& c, const char* event) {
  return Json{{"event", event},
              {"block", c.block},
              {"tensor", c.tensor},
              {"addr", c.addr},
              {"bad_bytes", c.bad_bytes},
              {"expected", fmt::format("{:#018x}", c.expected)},
              {"found", fmt::format("{:#018x}", c.found)},
              {"when", std::string(c.when)}};
}

void report_corruptions(kb::Simulator& sim) {
  for (const kb::CorruptionReport& c : sim.take_corruptions()) {
    std::cerr << fmt::format(
        "kvsim: CORRUPTION: block {} tensor {} at {:#x}: {} bad bytes (read {:#018x}, wrote "
        "{:#018x}) found at {}\n",
        c.block, c.tensor, c.addr, c.bad_bytes, c.found, c.expected, c.when);
    Output::event(corruption_json(c, "corruption"));
  }
}

// --truth-record: the bytes decode read from each chunk of the pool, one window after another,
// as KVTREC accesses records (docs/recording.md), with kvtier's own encoder. kvtierd records
// its steps in another file; kvtierctl replay --truth merges the two by time.
class TruthRecorder {
 public:
  TruthRecorder(const std::string& path, kb::Simulator& sim, kvtier::Pid pid,
                kvtier::AddrRange pool, std::uint64_t chunk_bytes, TimeNs window, TimeNs now)
      : sim_(sim), pid_(pid), pool_(pool), chunk_bytes_(chunk_bytes), window_(window), begin_(now) {
    // No size or time limit of its own: the run's --duration bounds it.
    auto w = kvtier::agent::RecordingWriter::create(
        std::filesystem::absolute(path),
        kvtier::agent::RecordingLimits{.max_bytes = UINT64_MAX, .max_duration = UINT64_MAX / 2},
        now);
    writer_ = need(std::move(w));
    sim_.count_chunk_reads();
  }
  // Writes the window that ended by `now`, if one did (or whatever is counted, when `last`).
  void tick(TimeNs now, bool last = false) {
    if (writer_ == nullptr || (!last && now < begin_ + window_)) return;
    const kvtier::agent::RecAccesses rec{.pid = pid_,
                                         .begin = begin_,
                                         .end = now,
                                         .base = pool_.start,
                                         .block_bytes = chunk_bytes_,
                                         .bytes_read = sim_.take_chunk_reads()};
    begin_ = now;
    if (!writer_->write(rec, now)) {
      std::cerr << fmt::format("kvsim: --truth-record {}: stopped: {}\n", writer_->path().string(),
                               writer_->stopped_because());
      writer_.reset();
      return;
    }
    writer_->flush();
  }

 private:
  static std::unique_ptr<kvtier::agent::RecordingWriter> need(
      kvtier::Result<std::unique_ptr<kvtier::agent::RecordingWriter>> r) {
    if (!r) throw std::runtime_error("--truth-record " + r.error().message);
    return std::move(*r);
  }
  kb::Simulator& sim_;
  kvtier::Pid pid_;
  kvtier::AddrRange pool_;
  std::uint64_t chunk_bytes_;
  TimeNs window_;
  TimeNs begin_;
  std::unique_ptr<kvtier::agent::RecordingWriter> writer_;
};

// The model, then the scaling that makes it fit the budget.
struct Scaled {
  kb::ModelShape model;
  kb::Scaling sc;
};

Scaled scaled_model(const Options& o) {
  kb::ModelShape model = need(kb::model_preset(o.preset));
  if (o.layers) model.layers = *o.layers;
  if (o.kv_heads) model.kv_heads = *o.kv_heads;
  if (o.head_dim) model.head_dim = *o.head_dim;
  if (!o.dtype.empty()) model.dtype_bytes = need(kb::dtype_bytes(o.dtype));
  if (o.layers || o.kv_heads || o.head_dim || !o.dtype.empty()) model.name += "-custom";
  const kb::Scaling sc =
      need(kb::choose_scaling(kb::ScalingRequest{.model = model,
                                                 .budget_bytes = need(kb::parse_size(o.budget)),
                                                 .capacity_tokens = o.capacity_tokens,
                                                 .layer_scale = o.layer_scale,
                                                 .token_scale = o.token_scale}));
  return Scaled{.model = model, .sc = sc};
}

// What the start event says and the run needs, fixed before the pool is touched.
struct Setup {
  Scaled scaled;
  double step_ms = 0;
  kb::TraceFormat format{};
  std::size_t requests = 0;
  double span = 0;
  kb::PoolLayout layout;
  kvtier::AddrRange range;
  kvtier::Pid pid = 0;
};

// Ready before the start event: a placer may open it as soon as it has read the pid.
std::optional<kb::LiveTruthWriter> open_live_truth(const Options& o, const Setup& s) {
  if (o.live_truth.empty()) return std::nullopt;
  return need(kb::LiveTruthWriter::create(
      o.live_truth, kb::LiveTruthHeader{.pid = s.pid,
                                        .pool_start = s.range.start,
                                        .pool_end = s.range.end,
                                        .blocks = s.layout.blocks,
                                        .tensors = s.layout.tensors(),
                                        .chunk_bytes = s.layout.chunk_bytes,
                                        .tensor_bytes = s.layout.tensor_bytes(),
                                        .created_ns = mono_now()}));
}

// Before the start event: a driver may signal as soon as it has read the pid.
void install_signal_handlers() {
  struct sigaction sa {};
  sa.sa_handler = on_usr1;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGUSR1, &sa, nullptr);
  sa.sa_handler = on_stop;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
}

Json start_event(const Options& o, const Setup& s) {
  const kb::ModelShape& model = s.scaled.model;
  const kb::Scaling& sc = s.scaled.sc;
  const kb::PoolLayout& layout = s.layout;
  return Json{
      {"event", "start"},
      {"pid", s.pid},
      {"pool", {s.range.start, s.range.end}},
      {"pool_bytes", s.range.bytes()},
      {"threads", 1 + o.idle_threads},
      {"model",
       {{"name", model.name},
        {"layers", model.layers},
        {"kv_heads", model.kv_heads},
        {"head_dim", model.head_dim},
        {"dtype_bytes", model.dtype_bytes},
        {"kv_bytes_per_token", model.kv_bytes_per_token()}}},
      {"sim",
       {{"layers", sc.sim_layers},
        {"layer_scale", sc.layer_scale},
        {"token_scale", sc.token_scale},
        {"blocks", sc.blocks},
        {"block_tokens", kb::kBlockTokens},
        {"block_bytes", layout.block_bytes()},
        {"chunk_bytes", layout.chunk_bytes},
        {"tensors", layout.tensors()},
        {"capacity_tokens", sc.capacity_tokens},
        {"lines_per_page", o.lines_per_page},
        {"step_ms", s.step_ms},
        {"max_batch", o.max_batch}}},
      {"trace",
       {{"path", o.trace},
        {"format", std::string(kb::trace_format_name(s.format))},
        {"requests", s.requests},
        {"span_s", s.span}}},
      {"time_scale", o.time_scale},
      {"pool_pages", o.hugepages      ? "MADV_HUGEPAGE"
                     : o.no_hugepages ? "MADV_NOHUGEPAGE"
                                      : "system default"},
      {"scaled",
       fmt::format("each simulated layer stands for {} of {} layers, each simulated token for {} "
                   "real tokens (prompts and outputs); {} blocks of {} bytes stand for {} tokens",
                   sc.layer_scale, model.layers, sc.token_scale, sc.blocks, layout.block_bytes(),
                   sc.capacity_tokens)}};
}

// An episode of a block's use starts after an idle gap as long as the shortest cold age:
// what the cold_bytes figures call cold coming back.
kb::SimConfig sim_config_of(const Options& o, const kb::Scaling& sc) {
  return kb::SimConfig{.scaling = sc,
                       .time_scale = o.time_scale,
                       .max_batch = o.max_batch,
                       .seed = o.seed,
                       .lines_per_page = o.lines_per_page,
                       .loop = o.loop,
                       .read_nodes_every = o.read_nodes_every,
                       .episode_gap = static_cast<TimeNs>(
                           (o.cold_ages.empty() ? 10.0 : std::ranges::min(o.cold_ages)) * 1e9),
                       .reaction_window = static_cast<TimeNs>(o.reaction_window_s * 1e9)};
}

// One run once started: the simulator, its pacing, and the counters since the last stats line.
class Run {
 public:
  Run(const Options& o, const Setup& s, kb::Trace trace, kb::KvPool& pool, Output& out,
      kb::LiveTruthWriter* live)
      : o_(o),
        s_(s),
        out_(out),
        start_(mono_now()),
        sim_config_(sim_config_of(o, s.scaled.sc)),
        sim_(sim_config_, std::move(trace), pool, start_),
        interval_(static_cast<TimeNs>(o.stats_interval_s * 1e9)),
        end_(o.duration_s > 0 ? start_ + static_cast<TimeNs>(o.duration_s * 1e9) : 0),
        min_step_(static_cast<TimeNs>(s.step_ms * 1e6)),
        prefill_pass_(static_cast<TimeNs>(o.prefill_ms.value_or(o.decode_ms) * o.time_scale * 1e6)),
        next_stats_(start_ + interval_),
        last_stats_(start_),
        last_(sim_.counters()) {
    if (live != nullptr) sim_.mirror_truth(live->last_access());
    if (!o.truth_record.empty()) {
      truth_rec_.emplace(o.truth_record, sim_, s.pid, s.range, s.layout.chunk_bytes,
                         static_cast<TimeNs>(o.truth_window_s * 1e9), start_);
    }
    // The node queries are measurement, not decode work: their time is kept out of busy time.
    if (o.read_nodes_every > 0) {
      sim_.set_page_node_query([this](std::span<void* const> pages, std::span<int> nodes) {
        const TimeNs t0 = mono_now();
        query_page_nodes(pages, nodes);
        query_ns_ += mono_now() - t0;
      });
    }
  }
  Run(const Run&) = delete;
  Run& operator=(const Run&) = delete;

  void loop() {
    while (g_stop == 0) {
      const TimeNs now = mono_now();
      if (end_ != 0 && now >= end_) break;
      if (g_dump_truth != 0) {
        g_dump_truth = 0;
        write_truth(now);
      }
      inject_when_due();
      const Stepped st = step(now);
      if (st.stepped) continue;
      if (sim_.done()) break;
      idle(st.after);
    }
  }

  // The last stats line, the truth, the end event; the exit status.
  int finish() {
    const TimeNs stop = mono_now();
    // A last line for the part since the previous one, unless it is too short to give rates.
    if (stop - last_stats_ >= interval_ / 4) stats_line(stop);
    write_truth(stop);
    if (truth_rec_) truth_rec_->tick(stop, true);
    sim_.verify_all();
    report_corruptions(sim_);
    const kb::SimCounters& c = sim_.counters();
    Output::event(end_event(stop));
    if (c.corrupted_bytes > 0) {
      std::cerr << fmt::format("kvsim: FAILED: {} corrupted bytes found (see corruption events)\n",
                               c.corrupted_bytes);
      return kExitCorrupt;
    }
    return kExitOk;
  }

 private:
  void write_truth(TimeNs now) {
    if (o_.truth.empty()) return;
    auto r = kb::write_truth(
        o_.truth, sim_.truth(), sim_.states(),
        kb::TruthContext{.pid = s_.pid, .now = now, .pool = s_.range, .layout = s_.layout});
    if (!r) {
      std::cerr << "kvsim: " << r.error().message << '\n';
      return;
    }
    Output::event(Json{{"event", "truth"}, {"path", o_.truth}, {"time_ns", now}});
  }

  void inject_when_due() {
    if (o_.inject_after && !injected_ && sim_.counters().steps >= *o_.inject_after) {
      if (auto c = sim_.inject_corruption()) {
        injected_ = true;
        Output::event(corruption_json(*c, "injected"));
      }
    }
  }

  struct Stepped {
    bool stepped = false;
    TimeNs after = 0;  // when the step (or the finding that none was due) ended
  };
  // One decode step if one is due, paced to min_step_.
  Stepped step(TimeNs step_began) {
    const TimeNs query_before = query_ns_;
    // The prefill is a forward pass of its own: the first decode step that reads a new
    // sequence's blocks comes one pass later, not in the same instant.
    TimeNs waited = 0;
    if (sim_.admit(step_began) > 0 && prefill_pass_ > 0) {
      sleep_ns(prefill_pass_);
      waited = mono_now() - step_began;
    }
    const bool stepped = sim_.decode(step_began + waited);
    if (stepped && o_.flush_tlb) flush_own_tlb();
    report_corruptions(sim_);
    const TimeNs now = mono_now();
    if (stepped) busy_ns_ += now - step_began - waited - (query_ns_ - query_before);
    if (now >= next_stats_) {
      stats_line(now);
      next_stats_ = std::max(next_stats_ + interval_, now);
    }
    if (truth_rec_) truth_rec_->tick(now);
    if (!stepped) return Stepped{.stepped = false, .after = now};
    const TimeNs took = mono_now() - step_began;
    if (took < min_step_) sleep_ns(min_step_ - took);
    return Stepped{.stepped = true, .after = now};
  }

  // Idle: sleep until the next arrival, the next stats line or the end, at most 100 ms so
  // signals are served promptly.
  void idle(TimeNs now) const {
    TimeNs wake = std::min<TimeNs>(next_stats_, now + 100'000'000ULL);
    if (auto a = sim_.next_arrival()) wake = std::min(wake, *a);
    if (end_ != 0) wake = std::min(wake, end_);
    if (wake > now) sleep_ns(wake - now);
  }

  // The cold_bytes figures for each cold age, and (by the first age) hot and in-use bytes.
  struct Cold {
    Json cold = Json::object();
    Json cold_in_use = Json::object();
    std::uint64_t hot = 0;
    std::uint64_t in_use = 0;
  };
  Cold cold_figures(TimeNs now) const {
    Cold r;
    for (std::size_t i = 0; i < o_.cold_ages.size(); ++i) {
      const auto age = static_cast<TimeNs>(o_.cold_ages[i] * 1e9);
      const kb::ColdBytes cb =
          kb::cold_bytes(sim_.truth(), sim_.states(), s_.layout, now, age, o_.no_populate);
      const std::string key = fmt::format("{:g}", o_.cold_ages[i]);
      r.cold[key] = cb.cold;
      r.cold_in_use[key] = cb.cold_in_use;
      if (i == 0) {
        r.hot = cb.resident - cb.cold;
        r.in_use = cb.in_use;
      }
    }
    return r;
  }

  void stats_line(TimeNs now) {
    out_.stats(stats_json(now));
    last_ = sim_.counters();
    last_stats_ = now;
    last_busy_ns_ = busy_ns_;
  }

  Json stats_json(TimeNs now) const {
    const kb::SimCounters& c = sim_.counters();
    const kb::SimCounters& last = last_;
    const double dt = static_cast<double>(now - last_stats_) / 1e9;
    const auto rate = [&](std::uint64_t a, std::uint64_t b) {
      return dt > 0 ? static_cast<double>(a - b) / dt : 0.0;
    };
    std::uint64_t by_state[3] = {0, 0, 0};
    for (kb::BlockState st : sim_.states()) ++by_state[static_cast<int>(st)];
    const Cold cold = cold_figures(now);
    const double busy_s = static_cast<double>(busy_ns_ - last_busy_ns_) / 1e9;
    const std::uint64_t steps = c.steps - last.steps;
    return Json{{"event", "stats"},
                {"t_s", static_cast<double>(now - start_) / 1e9},
                {"time_ns", now},
                {"trace_s", static_cast<double>(now - start_) / 1e9 / o_.time_scale},
                {"steps", c.steps},
                {"steps_per_s", rate(c.steps, last.steps)},
                {"read_bytes_per_s", rate(c.read_bytes, last.read_bytes)},
                {"loaded_bytes_per_s", rate(c.loaded_bytes, last.loaded_bytes)},
                {"written_bytes_per_s", rate(c.written_bytes, last.written_bytes)},
                {"tokens_per_s", rate(c.tokens_decoded, last.tokens_decoded)},
                {"running", sim_.running()},
                {"waiting", sim_.waiting()},
                {"arrived", c.arrived},
                {"admitted", c.admitted},
                {"finished", c.finished},
                {"rejected", c.rejected},
                {"hit_blocks", c.hit_blocks},
                {"miss_blocks", c.miss_blocks},
                {"evicted_blocks", c.evicted_blocks},
                {"free_blocks", by_state[static_cast<int>(kb::BlockState::kFree)]},
                {"active_blocks", by_state[static_cast<int>(kb::BlockState::kActive)]},
                {"cached_blocks", by_state[static_cast<int>(kb::BlockState::kCached)]},
                {"pool_bytes", s_.layout.total_bytes()},
                {"step_work_ms", steps > 0 ? busy_s * 1e3 / static_cast<double>(steps) : 0.0},
                {"busy_frac", dt > 0 ? busy_s / dt : 0.0},
                {"in_use_bytes", cold.in_use},
                {"hot_bytes", cold.hot},
                {"cold_bytes", cold.cold},
                {"cold_in_use_bytes", cold.cold_in_use},
                {"corrupted_bytes", c.corrupted_bytes},
                {"read_nodes", read_nodes_json(c, sim_config_, query_ns_)}};
  }

  Json end_event(TimeNs stop) const {
    const kb::SimCounters& c = sim_.counters();
    const double secs = static_cast<double>(stop - start_) / 1e9;
    return Json{
        {"event", "end"},
        {"duration_s", secs},
        {"steps", c.steps},
        {"steps_per_s", secs > 0 ? static_cast<double>(c.steps) / secs : 0.0},
        {"step_work_ms",
         c.steps > 0 ? static_cast<double>(busy_ns_) / 1e6 / static_cast<double>(c.steps) : 0.0},
        {"read_bytes", c.read_bytes},
        {"read_bytes_per_s", secs > 0 ? static_cast<double>(c.read_bytes) / secs : 0.0},
        {"loaded_bytes", c.loaded_bytes},
        {"written_bytes", c.written_bytes},
        {"verified_bytes", c.verified_bytes},
        {"tokens", c.tokens_decoded},
        {"arrived", c.arrived},
        {"admitted", c.admitted},
        {"finished", c.finished},
        {"rejected", c.rejected},
        {"hit_blocks", c.hit_blocks},
        {"miss_blocks", c.miss_blocks},
        {"evicted_blocks", c.evicted_blocks},
        {"corrupted_bytes", c.corrupted_bytes},
        {"read_nodes", read_nodes_json(c, sim_config_, query_ns_)},
        {"result", c.corrupted_bytes > 0 ? "corrupt" : "ok"}};
  }

  const Options& o_;
  const Setup& s_;
  Output& out_;
  const TimeNs start_;
  const kb::SimConfig sim_config_;
  kb::Simulator sim_;
  std::optional<TruthRecorder> truth_rec_;
  const TimeNs interval_;
  const TimeNs end_;  // 0: when the trace ends
  const TimeNs min_step_;
  const TimeNs prefill_pass_;
  TimeNs next_stats_;
  TimeNs last_stats_;
  kb::SimCounters last_;
  TimeNs query_ns_ = 0;
  bool injected_ = false;
  TimeNs busy_ns_ = 0;  // wall time spent admitting and decoding, without pacing sleeps
  TimeNs last_busy_ns_ = 0;
};

int run(const Options& o) {
  Setup s{.scaled = scaled_model(o)};
  const kb::ModelShape& model = s.scaled.model;
  // A simulated step stands for token_scale real decode iterations; pacing it to their trace
  // time keeps as many sequences running at once as the real server would have.
  s.step_ms = o.step_ms ? *o.step_ms
                        : o.decode_ms * static_cast<double>(s.scaled.sc.token_scale) * o.time_scale;
  s.format = o.trace_format.empty() ? need(kb::trace_format_from_path(o.trace))
                                    : need(kb::parse_trace_format(o.trace_format));
  kb::Trace trace = need(kb::read_trace(o.trace, s.format));
  s.requests = trace.requests.size();
  s.span = trace.span_s();
  s.layout = kb::PoolLayout{.layers = s.scaled.sc.sim_layers,
                            .blocks = s.scaled.sc.blocks,
                            .chunk_bytes = model.chunk_bytes(),
                            .token_bytes = model.token_bytes()};
  kb::KvPool pool =
      need(kb::KvPool::create(s.layout, kb::PoolOptions{.hugepages = o.hugepages,
                                                        .no_hugepages = o.no_hugepages,
                                                        .populate = !o.no_populate}));
  s.range = pool.range();
  s.pid = static_cast<kvtier::Pid>(getpid());
  std::optional<kb::LiveTruthWriter> live = open_live_truth(o, s);
  const IdleThreads idle(o.idle_threads);
  install_signal_handlers();
  Output out(o.stats);
  Output::event(start_event(o, s));
  Run r(o, s, std::move(trace), pool, out, live ? &*live : nullptr);
  r.loop();
  return r.finish();
}

// The trace and the model, and how they are scaled to the budget.
void add_model_options(CLI::App& app, Options& o) {
  app.add_option("--trace", o.trace, "Request trace: Mooncake .jsonl or Azure .csv")
      ->capture_default_str()
      ->check(CLI::ExistingFile);
  app.add_option("--trace-format", o.trace_format, "mooncake|azure (default: by extension)")
      ->check(CLI::IsMember({"mooncake", "azure"}));
  app.add_option("--preset", o.preset, "Model: llama3-8b|llama3-70b")->capture_default_str();
  app.add_option("--layers", o.layers, "Override the model's layer count");
  app.add_option("--kv-heads", o.kv_heads, "Override the model's KV heads");
  app.add_option("--head-dim", o.head_dim, "Override the model's head dimension");
  app.add_option("--dtype", o.dtype, "Override the KV dtype: fp16|bf16|fp8|fp32");
  app.add_option("--kv-budget", o.budget, "Memory for the KV pool, e.g. 256MiB, 1GiB")
      ->capture_default_str();
  app.add_option("--capacity-tokens", o.capacity_tokens,
                 "KV capacity of the modelled server in real tokens; scaled to fit the budget")
      ->capture_default_str();
  app.add_option("--layer-scale", o.layer_scale, "Force: real layers per simulated layer");
  app.add_option("--token-scale", o.token_scale,
                 "Force: real tokens per simulated token (1,2,4,8,16,32)");
}

// How fast the trace plays, how decode runs, and the pool's pages.
void add_run_options(CLI::App& app, Options& o) {
  app.add_option("--time-scale", o.time_scale,
                 "Wall seconds per trace second (0.05 plays an hour in 3 minutes)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--duration", o.duration_s, "Stop after S seconds (0: when the trace ends)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_flag("--loop", o.loop, "Replay the trace when it ends");
  app.add_option("--max-batch", o.max_batch, "Running sequences at most")
      ->capture_default_str()
      ->check(CLI::Range(1U, 100000U));
  app.add_option("--seed", o.seed, "Pattern seed")->capture_default_str();
  app.add_option("--lines-per-page", o.lines_per_page,
                 "64-byte lines checked per 4 KiB page on each read (64: every byte)")
      ->capture_default_str()
      ->check(CLI::Range(1U, 64U));
  app.add_flag("--flush-tlb", o.flush_tlb,
               "Flush this process's TLB after every decode step (for QEMU TCG guests, whose "
               "software TLB otherwise hides every access from DAMON)");
  auto* huge = app.add_flag("--hugepages", o.hugepages, "madvise(MADV_HUGEPAGE) the pool");
  app.add_flag("--no-hugepages", o.no_hugepages,
               "madvise(MADV_NOHUGEPAGE) the pool: 4 KiB pages even where transparent huge pages "
               "are \"always\" (a 2 MiB page holds chunks of 64 blocks, which then move together)")
      ->excludes(huge);
  app.add_flag("--no-populate", o.no_populate, "Do not fault the pool in at start");
  app.add_option("--decode-ms", o.decode_ms,
                 "Trace time of one real decode iteration; a simulated step is paced to "
                 "decode-ms x token-scale x time-scale of wall time (0: flat out)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_option("--prefill-ms", o.prefill_ms,
                 "Trace time of the prefill pass that admits new sequences (default: --decode-ms): "
                 "kvsim waits this x time-scale between admitting them and the decode step that "
                 "first reads their blocks, as an engine's next pass comes after the prefill's "
                 "(0: in the same instant)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--step-ms", o.step_ms,
                 "Minimum wall time of a decode step, instead of the one --decode-ms gives "
                 "(0: flat out)")
      ->check(CLI::NonNegativeNumber);
}

// What kvsim writes: ground truth, stats lines, and the measurements they carry.
void add_output_options(CLI::App& app, Options& o) {
  app.add_option("--truth", o.truth,
                 "Write per-block ground truth here at the end and on SIGUSR1 (.csv or JSON)");
  app.add_option("--live-truth", o.live_truth,
                 "Keep every block's last access time in FILE, a shared mapping another process "
                 "(the benchmark's oracle) reads while kvsim runs (bench/kvsim/live_truth.hpp)");
  app.add_option("--truth-record", o.truth_record,
                 "Write the bytes decode reads from each chunk (a block in one tensor) of the "
                 "pool, per window, to FILE as a kvtier recording (accesses records; a new "
                 "file): ground truth for kvtierctl replay --truth (docs/recording.md)");
  app.add_option("--truth-window", o.truth_window_s, "Seconds per --truth-record window")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--stats", o.stats, "Write stats lines here instead of stdout");
  app.add_option("--stats-interval", o.stats_interval_s, "Seconds between stats lines")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--cold-ages", o.cold_ages, "Ages (s) for the cold_bytes figures")
      ->delimiter(',')
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--inject-corruption", o.inject_after,
                 "Fault injection: flip one byte of a block in use after N decode steps "
                 "(the run must then fail with status 3)");
  app.add_option("--read-nodes-every", o.read_nodes_every,
                 "Every N decode steps, ask the kernel (move_pages) which NUMA node holds each "
                 "page the step reads and count the read bytes per node (0: never)")
      ->capture_default_str();
  app.add_option("--reaction-window", o.reaction_window_s,
                 "Seconds: --read-nodes-every also counts, per node, the bytes of blocks whose "
                 "episode of use (filled anew, or back after the shortest --cold-ages idle) began "
                 "at least this long before the read (late_by_node)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_option("--idle-threads", o.idle_threads,
                 "Start N threads that only wait, as an inference server has many (with one "
                 "thread the kernel's NUMA scan leaves kvsim's pages on its own node mapped, so "
                 "reads of them cause no NUMA hint fault)")
      ->capture_default_str()
      ->check(CLI::Range(0U, 1024U));
}

int parse_and_run(int argc, char** argv) {
  CLI::App app{"kvsim: a paged KV-cache workload simulator driven by LLM serving traces"};
  Options o;
  add_model_options(app, o);
  add_run_options(app, o);
  add_output_options(app, o);
  app.footer("Exit status: 0 success, 1 error, 2 bad usage, 3 corrupted KV data found.");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? kExitOk : kExitUsage;
  }
  if (app.count("--trace") == 0 && access(o.trace.c_str(), R_OK) != 0) {
    const int err = errno;
    std::cerr << fmt::format(
        "kvsim: no --trace given, and the default trace {} cannot be read ({}); pass --trace "
        "FILE (the repository ships its traces in bench/traces/)\n",
        o.trace, kvtier::errno_text(err));
    return kExitUsage;
  }
  return run(o);
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return parse_and_run(argc, argv);
  } catch (const std::exception& e) {
    std::cerr << "kvsim: " << e.what() << '\n';
    return kExitFailed;
  }
}
