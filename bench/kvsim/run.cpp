#include "bench/kvsim/run.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <iostream>
#include <optional>
#include <span>
#include <string>
#include <utility>

#include "bench/kvsim/ground_truth.hpp"
#include "bench/kvsim/kv_pool.hpp"
#include "bench/kvsim/live_truth.hpp"
#include "bench/kvsim/model_shape.hpp"
#include "bench/kvsim/options.hpp"
#include "bench/kvsim/output.hpp"
#include "bench/kvsim/process.hpp"
#include "bench/kvsim/simulator.hpp"
#include "bench/kvsim/trace.hpp"
#include "policy/types.hpp"

namespace kvtier::bench::kvsim {
namespace {

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
    while (!stop_requested()) {
      const TimeNs now = mono_now();
      if (end_ != 0 && now >= end_) break;
      if (take_truth_request()) write_truth(now);
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
}  // namespace

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

}  // namespace kvtier::bench::kvsim
