#include "bench/kvsim/output.hpp"

#include <fmt/format.h>

#include <cstdint>
#include <filesystem>
#include <iostream>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>

#include "agent/loop/recording.hpp"
#include "bench/kvsim/simulator.hpp"
#include "policy/error.hpp"
#include "policy/types.hpp"

namespace kvtier::bench::kvsim {
namespace {

std::unique_ptr<kvtier::agent::RecordingWriter> need_writer(
    kvtier::Result<std::unique_ptr<kvtier::agent::RecordingWriter>> r) {
  if (!r) throw std::runtime_error("--truth-record " + r.error().message);
  return std::move(*r);
}

}  // namespace

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

Output::Output(const std::string& stats_path) {
  if (!stats_path.empty()) {
    file_.open(stats_path, std::ios::out | std::ios::trunc);
    if (!file_) throw std::runtime_error(fmt::format("{}: cannot write stats", stats_path));
  }
}

void Output::event(const Json& j) {
  std::cout << j.dump() << '\n' << std::flush;
}

void Output::stats(const Json& j) {
  if (file_.is_open()) {
    file_ << j.dump() << '\n' << std::flush;
  } else {
    event(j);
  }
}

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

TruthRecorder::TruthRecorder(const std::string& path, kb::Simulator& sim, kvtier::Pid pid,
                             kvtier::AddrRange pool, std::uint64_t chunk_bytes, TimeNs window,
                             TimeNs now)
    : sim_(sim), pid_(pid), pool_(pool), chunk_bytes_(chunk_bytes), window_(window), begin_(now) {
  // No size or time limit of its own: the run's --duration bounds it.
  auto w = kvtier::agent::RecordingWriter::create(
      std::filesystem::absolute(path),
      kvtier::agent::RecordingLimits{.max_bytes = UINT64_MAX, .max_duration = UINT64_MAX / 2}, now);
  writer_ = need_writer(std::move(w));
  sim_.count_chunk_reads();
}

void TruthRecorder::tick(TimeNs now, bool last) {
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

}  // namespace kvtier::bench::kvsim
