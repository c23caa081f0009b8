// kvtier_llama_load: replays a shipped trace's conversations against llama-server's
// /completion (bench/loadgen/conversation.hpp) with N concurrent clients, and records what the
// clients see and, with --pid, the ground truth of the server's KV buffer
// (bench/loadgen/truth.hpp). Runs in the guest beside the server (plain HTTP/1.1 on loopback).
//
//   kvtier_llama_load [--trace FILE] [--clients N] [--conversations N] [--speed X]
//                     [--duration S] [--pid PID --kv-data ADDR] [--out FILE] ...
//   kvtier_llama_load --integrity N [--out FILE]: N fixed prompts at temperature 0, one at a
//                     time, each answer's text and token ids recorded.
//
// Output, JSON lines (--out, default stdout):
//   {"type":"request","t","client","conv","turn","line","prompt_chars","n_predict","status":
//    "ok"|"error"|"timeout","error","due_s" (the turn's trace time over --speed: the schedule),
//    "late_s" (how long after due_s it was sent),"wall_s","ttft_s" (the answer's time less its
//    decode time: queueing and the
//    prompt),"prompt_ms","predicted_ms","decode_tps","tokens_cached","cache_n","prompt_n",
//    "predicted_n","id_slot"}
//    "win": what the CPU did while the request was in flight (bench/loadgen/procstat.hpp):
//    {"server_cpu_ms","server_delay_ms" (with --pid),"watch_cpu_ms","watch_delay_ms" (with
//    --watch-pid),"self_cpu_ms","busy_ms","idle_ms","system_ms","softirq_ms","vm":{counter: n}}
//   {"type":"metrics","t","values":{name: value}} every --metrics-every s (or "error")
//   {"type":"truth","t","active"|"idle"|"unused":{"0","1","other"} bytes,"slots":[cells..]}
//     every --truth-every s with --pid (or "error", after which sampling stops)
//   {"type":"integrity","i","content","tokens","status","error"}
//   {"type":"summary","requests","ok","errors","timeouts","wall_s","conversations"}
// Exit status: 0; 1 if every request failed; 2 bad options or trace.

#include <unistd.h>
#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <limits>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "agent/host/residency.hpp"
#include "bench/kvsim/trace.hpp"
#include "bench/loadgen/conversation.hpp"
#include "bench/loadgen/http.hpp"
#include "bench/loadgen/procstat.hpp"
#include "bench/loadgen/truth.hpp"
#include "bench/main_guard.hpp"
#include "policy/types.hpp"

namespace lg = kvtier::bench::loadgen;
using Clock = std::chrono::steady_clock;

namespace {

struct Options {
  std::string trace;
  std::string format;
  std::uint16_t port = 8080;
  unsigned clients = 0;  // 0: one per conversation (open loop)
  lg::ConversationOptions conv{
      .max_conversations = 24, .min_turns = 2, .output_scale = 8, .max_predict = 16, .from_s = 0};
  std::size_t block_chars = 4;
  double speed = 10;  // trace seconds per second
  double duration_s = 240;
  double timeout_s = 300;
  double metrics_every_s = 5;
  std::string out = "-";
  int pid = 0;
  int watch_pid = 0;
  std::string kv_data;
  lg::KvLayout layout;
  double cold_age_s = 10;
  double truth_every_s = 1;
  unsigned integrity = 0;
};

class Recorder {
 public:
  explicit Recorder(std::ostream& out) : out_(out) {}
  void write(const nlohmann::json& j) {
    const std::scoped_lock lock(mu_);
    out_ << j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << '\n' << std::flush;
  }

 private:
  std::mutex mu_;
  std::ostream& out_;
};

struct ConvState {
  std::size_t next = 0;
  bool in_flight = false;
  double ready_s = 0;  // run time at which the next turn may start
  int slot = -1;       // the slot that last answered
  std::string prompt;
  std::string completion;
};

class Replay {
 public:
  Replay(const Options& o, std::vector<lg::Conversation> convs, Recorder& rec)
      : o_(o), convs_(std::move(convs)), state_(convs_.size()), rec_(rec), slots_(o.layout.slots) {
    const double t0 = convs_.empty() ? 0 : convs_.front().turns.front().at_s;
    for (std::size_t i = 0; i < convs_.size(); ++i) {
      state_[i].ready_s = (convs_[i].turns.front().at_s - t0) / o_.speed;
    }
  }

  void run() {
    std::vector<std::jthread> threads;
    // With a client per conversation every turn is sent when it is due (or when the previous
    // turn of its conversation answers, if later): the schedule is the trace's whatever the
    // server's speed, the same in every run. Fewer clients make the replay closed loop.
    const auto n = o_.clients == 0 ? static_cast<unsigned>(convs_.size()) : o_.clients;
    threads.reserve(n);
    for (unsigned c = 0; c < n; ++c) {
      threads.emplace_back([this, c] { client(c); });
    }
    std::jthread metrics([this](const std::stop_token& st) { scrape(st); });
    std::jthread truth;
    if (o_.pid > 0) {
      truth = std::jthread([this](const std::stop_token& st) { sample(st); });
    }
    threads.clear();  // joins the clients
    metrics.request_stop();
    if (truth.joinable()) {
      truth.request_stop();
    }
  }

  [[nodiscard]] double now() const {
    return std::chrono::duration<double>(Clock::now() - start_).count();
  }
  std::uint64_t requests = 0, ok = 0, errors = 0, timeouts = 0;

 private:
  const long clk_tck_ = sysconf(_SC_CLK_TCK);
  // The conversation whose next turn is due first, or npos when none is left.
  std::size_t pick(std::size_t& waiting) const {
    std::size_t best = std::string::npos;
    waiting = 0;
    for (std::size_t i = 0; i < convs_.size(); ++i) {
      const ConvState& s = state_[i];
      if (s.next >= convs_[i].turns.size()) {
        continue;
      }
      ++waiting;
      if (!s.in_flight && (best == std::string::npos || s.ready_s < state_[best].ready_s)) {
        best = i;
      }
    }
    return best;
  }

  void client(unsigned id) {
    std::unique_lock lock(mu_);
    while (true) {
      std::size_t waiting = 0;
      const std::size_t i = pick(waiting);
      if (waiting == 0 || now() >= o_.duration_s) {
        return;
      }
      if (i == std::string::npos || state_[i].ready_s > now()) {
        const double until = i == std::string::npos ? now() + 1 : state_[i].ready_s;
        cv_.wait_for(lock, std::chrono::duration<double>(std::min(until - now(), 1.0)));
        continue;
      }
      turn(lock, id, i);
    }
  }

  void turn(std::unique_lock<std::mutex>& lock, unsigned client_id, std::size_t i) {
    ConvState& s = state_[i];
    const lg::Turn& t = convs_[i].turns[s.next];
    s.in_flight = true;
    s.prompt = lg::next_prompt(s.prompt, s.completion, t, o_.block_chars);
    if (s.slot >= 0 && static_cast<std::size_t>(s.slot) < slots_.size()) {
      slots_[s.slot].busy = true;
    }
    const std::string request =
        lg::http_request("POST", "/completion", "127.0.0.1",
                         lg::completion_body({.prompt = s.prompt, .n_predict = t.n_predict}));
    const double due = (t.at_s - convs_.front().turns.front().at_s) / o_.speed;
    const double sent = now();
    nlohmann::json rec = {{"type", "request"},
                          {"t", sent},
                          {"client", client_id},
                          {"conv", convs_[i].id},
                          {"turn", s.next},
                          {"line", t.line},
                          {"prompt_chars", s.prompt.size()},
                          {"n_predict", t.n_predict}};
    rec["due_s"] = due;
    rec["late_s"] = sent - due;
    lock.unlock();
    const lg::ProcSnapshot p0 = lg::take_snapshot(o_.pid, o_.watch_pid);
    const auto t0 = Clock::now();
    auto raw = lg::http_exchange(o_.port, request, timeout());
    const double wall = std::chrono::duration<double>(Clock::now() - t0).count();
    rec["win"] = lg::window_json(p0, lg::take_snapshot(o_.pid, o_.watch_pid), clk_tck_);
    auto done = raw ? lg::parse_http_response(*raw) : std::unexpected(raw.error());
    kvtier::Result<lg::Completion> c = std::unexpected(kvtier::Error{});
    if (done && done->status == 200) {
      c = lg::parse_completion(done->body);
    } else if (done) {
      c = kvtier::fail("HTTP " + std::to_string(done->status) + ": " + done->body.substr(0, 200));
    } else {
      c = std::unexpected(done.error());
    }
    lock.lock();
    finish(i, rec, wall, c);
    lock.unlock();
    rec_.write(rec);
    lock.lock();
    cv_.notify_all();
  }

  void finish(std::size_t i, nlohmann::json& rec, double wall,
              const kvtier::Result<lg::Completion>& c) {
    ConvState& s = state_[i];
    if (s.slot >= 0 && static_cast<std::size_t>(s.slot) < slots_.size()) {
      slots_[s.slot].busy = false;
    }
    ++requests;
    rec["wall_s"] = wall;
    s.in_flight = false;
    s.next++;
    if (s.next < convs_[i].turns.size()) {
      const double t0 = convs_.front().turns.front().at_s;
      s.ready_s = std::max(now(), (convs_[i].turns[s.next].at_s - t0) / o_.speed);
    }
    if (!c) {
      const bool late = c.error().code == ETIMEDOUT;
      (late ? timeouts : errors)++;
      rec["status"] = late ? "timeout" : "error";
      rec["error"] = c.error().message;
      s.completion.clear();
      return;
    }
    ++ok;
    s.completion = c->content;
    s.slot = c->id_slot;
    if (c->id_slot >= 0 && static_cast<std::size_t>(c->id_slot) < slots_.size()) {
      slots_[c->id_slot] = {.cells = c->tokens_cached, .last_answer_s = now(), .busy = false};
    }
    rec.update({{"status", "ok"},
                {"ttft_s", wall - c->predicted_ms / 1000},
                {"prompt_ms", c->prompt_ms},
                {"predicted_ms", c->predicted_ms},
                {"decode_tps", c->predicted_per_second},
                {"tokens_cached", c->tokens_cached},
                {"cache_n", c->cache_n},
                {"prompt_n", c->prompt_n},
                {"predicted_n", c->predicted_n},
                {"id_slot", c->id_slot}});
  }

  [[nodiscard]] std::chrono::milliseconds timeout() const {
    return std::chrono::milliseconds(static_cast<std::int64_t>(o_.timeout_s * 1000));
  }

  void scrape(const std::stop_token& st) {
    const std::string req = lg::http_request("GET", "/metrics", "127.0.0.1", "");
    while (!st.stop_requested()) {
      nlohmann::json rec = {{"type", "metrics"}, {"t", now()}};
      auto raw = lg::http_exchange(o_.port, req, std::chrono::seconds(30));
      auto res = raw ? lg::parse_http_response(*raw) : std::unexpected(raw.error());
      if (res && res->status == 200) {
        rec["values"] = lg::parse_metrics(res->body);
      } else {
        rec["error"] = res ? "HTTP " + std::to_string(res->status) : res.error().message;
      }
      rec_.write(rec);
      pause(st, o_.metrics_every_s);
    }
  }

  void sample(const std::stop_token& st) {
    kvtier::agent::ResidencyReader reader;
    const std::vector<kvtier::AddrRange> range = {{o_.layout.first_page(), o_.layout.end_page()}};
    while (!st.stop_requested()) {
      std::vector<lg::SlotState> slots;
      double t = 0;
      {
        const std::scoped_lock lock(mu_);
        slots = slots_;
        t = now();
      }
      std::string error;
      const kvtier::agent::PageMap map = reader.nodes(o_.pid, range, &error);
      if (!error.empty()) {
        rec_.write({{"type", "truth"}, {"t", t}, {"error", error}});
        return;
      }
      std::vector<lg::NodeRun> runs;
      runs.reserve(map.runs.size());
      for (const auto& r : map.runs) {
        runs.push_back({.start = r.range.start, .end = r.range.end, .node = r.node});
      }
      const auto classes = lg::classify_pages(o_.layout, slots, t, o_.cold_age_s);
      rec_.write(truth_record(t, lg::tally(o_.layout, classes, runs), slots));
      pause(st, o_.truth_every_s);
    }
  }

  static nlohmann::json truth_record(double t, const lg::ClassBytes& b,
                                     const std::vector<lg::SlotState>& slots) {
    nlohmann::json rec = {{"type", "truth"}, {"t", t}};
    for (const auto c : {lg::PageClass::kActive, lg::PageClass::kIdle, lg::PageClass::kUnused}) {
      rec[lg::page_class_name(c)] = {{"0", b.on(c, 0)}, {"1", b.on(c, 1)}, {"other", b.on(c, -1)}};
    }
    nlohmann::json cells = nlohmann::json::array();
    for (const auto& s : slots) {
      cells.push_back(s.cells);
    }
    rec["slots"] = cells;
    return rec;
  }

  void pause(const std::stop_token& st, double seconds) {
    std::unique_lock lock(mu_);
    cv_.wait_for(lock, st, std::chrono::duration<double>(seconds), [] { return false; });
  }

  const Options& o_;
  std::vector<lg::Conversation> convs_;
  std::vector<ConvState> state_;
  Recorder& rec_;
  std::vector<lg::SlotState> slots_;
  std::mutex mu_;
  std::condition_variable_any cv_;
  Clock::time_point start_ = Clock::now();
};

// The fixed prompts of the integrity check: the same texts in every run.
int integrity(const Options& o, Recorder& rec) {
  int failed = 0;
  for (unsigned i = 0; i < o.integrity; ++i) {
    const std::string prompt = lg::block_text(1000 + i, 48);
    auto raw = lg::http_exchange(
        o.port,
        lg::http_request("POST", "/completion", "127.0.0.1",
                         lg::completion_body({.prompt = prompt, .n_predict = 16})),
        std::chrono::milliseconds(static_cast<std::int64_t>(o.timeout_s * 1000)));
    auto res = raw ? lg::parse_http_response(*raw) : std::unexpected(raw.error());
    auto c = res && res->status == 200
                 ? lg::parse_completion(res->body)
                 : kvtier::Result<lg::Completion>(kvtier::fail(
                       res ? "HTTP " + std::to_string(res->status) : res.error().message));
    nlohmann::json j = {{"type", "integrity"}, {"i", i}};
    if (c) {
      j.update({{"status", "ok"}, {"content", c->content}, {"tokens", c->tokens}});
    } else {
      j.update({{"status", "error"}, {"error", c.error().message}});
      ++failed;
    }
    rec.write(j);
  }
  return failed == 0 ? 0 : 1;
}

void add_options(CLI::App& app, Options& o) {
  app.add_option("--trace", o.trace, "trace file (Mooncake .jsonl or Azure .csv)");
  app.add_option("--trace-format", o.format, "mooncake or azure (default: by extension)");
  app.add_option("--port", o.port, "llama-server's port on 127.0.0.1");
  app.add_option("--clients", o.clients,
                 "concurrent clients (0: one per conversation, each turn sent when due)")
      ->check(CLI::Range(0U, 4096U));
  app.add_option("--conversations", o.conv.max_conversations, "the first N conversations (0: all)");
  app.add_option("--min-turns", o.conv.min_turns, "leave out conversations with fewer turns");
  app.add_option("--from", o.conv.from_s, "trace time (s) of the first conversation");
  app.add_option("--block-chars", o.block_chars, "characters (tokens) per 512-token trace block")
      ->check(CLI::Range(1, 512));
  app.add_option("--output-scale", o.conv.output_scale, "trace output tokens per predicted token");
  app.add_option("--max-predict", o.conv.max_predict, "cap on n_predict");
  app.add_option("--speed", o.speed, "trace seconds per second of replay")
      ->check(CLI::PositiveNumber);
  app.add_option("--duration", o.duration_s, "no new request after this many seconds");
  app.add_option("--timeout", o.timeout_s, "seconds per request")->check(CLI::PositiveNumber);
  app.add_option("--metrics-every", o.metrics_every_s, "seconds between /metrics scrapes")
      ->check(CLI::PositiveNumber);
  app.add_option("--out", o.out, "JSON lines file (- for stdout)");
  app.add_option("--pid", o.pid, "the server's pid: sample its KV buffer's ground truth");
  app.add_option("--watch-pid", o.watch_pid,
                 "a process (kvtierd) whose CPU time each request's window records");
  app.add_option("--kv-data", o.kv_data, "address of the KV buffer's first byte (with --pid)");
  app.add_option("--slots", o.layout.slots, "the server's -np");
  app.add_option("--cells", o.layout.cells, "cells per slot (-c / -np)");
  app.add_option("--layers", o.layout.layers, "the model's layers");
  app.add_option("--row-bytes", o.layout.row_bytes, "bytes of one cell's K (or V) row");
  app.add_option("--cold-age", o.cold_age_s,
                 "seconds since a slot's last answer that make it idle");
  app.add_option("--truth-every", o.truth_every_s, "seconds between ground-truth samples")
      ->check(CLI::PositiveNumber);
  app.add_option("--integrity", o.integrity, "send N fixed prompts one at a time, then exit");
}

}  // namespace

static int parse_and_run(int argc, char** argv) {
  Options o;
  o.trace = KVTIER_LOADGEN_DEFAULT_TRACE;
  CLI::App app{"kvtier_llama_load: a trace's conversations against llama-server's /completion"};
  add_options(app, o);
  CLI11_PARSE(app, argc, argv);

  std::ofstream file;
  if (o.out != "-") {
    file.open(o.out);
    if (!file) {
      std::cerr << "kvtier_llama_load: cannot write " << o.out << '\n';
      return 2;
    }
  }
  Recorder rec(o.out == "-" ? std::cout : file);
  if (o.integrity > 0) {
    return integrity(o, rec);
  }
  if (o.pid > 0) {
    try {
      o.layout.data = std::stoull(o.kv_data, nullptr, 0);
    } catch (const std::exception&) {
      std::cerr
          << "kvtier_llama_load: --pid needs --kv-data ADDR (the KV buffer's first byte), got '"
          << o.kv_data << "'\n";
      return 2;
    }
  }
  auto format = o.format.empty() ? kvtier::bench::trace_format_from_path(o.trace)
                                 : kvtier::bench::parse_trace_format(o.format);
  auto trace =
      format ? kvtier::bench::read_trace(o.trace, *format) : std::unexpected(format.error());
  if (!trace) {
    std::cerr << "kvtier_llama_load: " << trace.error().message << '\n';
    return 2;
  }
  auto convs = lg::conversations_from_trace(*trace, o.conv);
  const std::size_t n = convs.size();
  Replay replay(o, std::move(convs), rec);
  replay.run();
  rec.write({{"type", "summary"},
             {"requests", replay.requests},
             {"ok", replay.ok},
             {"errors", replay.errors},
             {"timeouts", replay.timeouts},
             {"wall_s", replay.now()},
             {"conversations", n}});
  return replay.requests > 0 && replay.ok == 0 ? 1 : 0;
}

int main(int argc, char** argv) {
  return kvtier::bench::guarded_main("kvtier_llama_load", 2,
                                     [&] { return parse_and_run(argc, argv); });
}
