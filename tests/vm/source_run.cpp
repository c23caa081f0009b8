// kvtier_source_run: runs one hotness source against one process for a while
// and prints what it saw as JSON, for the guest-side source tests (the host
// side asserts on it with python3).
//
// Usage: kvtier_source_run SOURCE PID SECONDS [READY_FILE]
// READY_FILE is created once the source watches PID.
// SOURCE: damon | faults | pmu-soft. Output: {"source", "pid", "probe",
// "pages": [[addr, weight], ...] (page sources, summed over the run),
// "regions": [{start, end, nr_accesses, max_nr_accesses, age}] (DAMON: the
// last complete aggregation), "commit" (DAMON: the commits of shrunk, then
// grown ranges: {sent, replaced, error, set_ranges_us, wait_ms}), "stats": {...}, "migrations":
// {reason: {...}}}.

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>
#include <time.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "agent/host/procfs.hpp"
#include "agent/sources/damon_source.hpp"
#include "agent/sources/fault_sampler.hpp"
#include "agent/sources/migration_counter.hpp"
#include "agent/sources/pmu_sampler.hpp"

namespace {

using namespace kvtier;

TimeNs now_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<TimeNs>(ts.tv_sec) * 1'000'000'000ULL + static_cast<TimeNs>(ts.tv_nsec);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4 && argc != 5) {
    std::cerr << "usage: kvtier_source_run damon|faults|pmu-soft PID SECONDS [READY_FILE]\n";
    return 2;
  }
  spdlog::set_default_logger(spdlog::stderr_color_mt("source_run"));
  const std::string which = argv[1];
  const Pid pid = std::atoi(argv[2]);
  const double seconds = std::strtod(argv[3], nullptr);
  const agent::HostPaths paths;
  std::unique_ptr<agent::HotnessSource> src;
  agent::DamonSource* damon = nullptr;
  agent::FaultSampler* faults = nullptr;
  if (which == "damon") {
    // The intervals this test was measured with (kvtierd sizes its own from
    // cold_age): 5 ms sampling, 100 ms aggregation.
    auto d = std::make_unique<agent::DamonSource>(
        paths, agent::DamonOptions{.sample_us = 5000, .aggr_us = 100'000});
    damon = d.get();
    src = std::move(d);
  } else if (which == "faults") {
    auto f = std::make_unique<agent::FaultSampler>(paths, agent::FaultOptions{});
    faults = f.get();
    src = std::move(f);
  } else if (which == "pmu-soft") {
    src = std::make_unique<agent::PmuSampler>(
        paths, agent::PmuOptions{.events = agent::PmuEventChoice::kSoftware, .sample_period = 1});
  } else {
    std::cerr << "kvtier_source_run: unknown source " << which << '\n';
    return 2;
  }
  const agent::Availability a = src->probe();
  nlohmann::json out{{"source", which}, {"pid", pid}, {"probe", a.why}, {"available", a.ok}};
  if (!a.ok) {
    std::cout << out.dump() << '\n';
    return 3;
  }
  if (auto ok = src->start(); !ok) {
    std::cerr << "kvtier_source_run: " << ok.error().message << '\n';
    return 1;
  }
  const Pid targets[] = {pid};
  if (auto ok = src->set_targets(targets); !ok) {
    std::cerr << "kvtier_source_run: " << ok.error().message << '\n';
    return 1;
  }
  std::vector<std::int64_t> set_ranges_us;
  if (damon != nullptr) {
    // DAMON watches the mappings kvtierd would track (anonymous, writable,
    // 1 MiB or more), as the controller tells it.
    auto maps = agent::read_maps(paths, pid);
    if (!maps) {
      std::cerr << "kvtier_source_run: " << maps.error().message << '\n';
      return 1;
    }
    agent::TargetRanges t{.pid = pid};
    for (const auto& e : *maps) {
      if (agent::is_movable_anon(e) && e.range.bytes() >= (1U << 20)) t.ranges.push_back(e.range);
    }
    // The kdamond starts on the whole ranges; then, as when mappings shrink and grow, every
    // range less its last sixteenth and the whole ranges again are committed to the running
    // kdamond from the source's thread (the second replaces the first if it came while the
    // first waited). The regions cover the whole buffer at the end only if the kernel applied
    // the last commit.
    agent::TargetRanges shrunk = t;
    for (auto& r : shrunk.ranges) r.end -= r.bytes() / 16 / kPageSize * kPageSize;
    for (const auto* ranges : {&t, &shrunk, &t}) {
      const auto t0 = std::chrono::steady_clock::now();
      if (auto ok = damon->set_ranges(std::span<const agent::TargetRanges>(ranges, 1)); !ok) {
        std::cerr << "kvtier_source_run: " << ok.error().message << '\n';
        return 1;
      }
      set_ranges_us.push_back(std::chrono::duration_cast<std::chrono::microseconds>(
                                  std::chrono::steady_clock::now() - t0)
                                  .count());
    }
    const auto t0 = std::chrono::steady_clock::now();
    damon->wait_commits();
    out["commit"] = {{"sent", damon->commits()},
                     {"replaced", damon->commits_replaced()},
                     {"error", damon->commit_error()},
                     {"set_ranges_us", set_ranges_us},
                     {"wait_ms", std::chrono::duration_cast<std::chrono::milliseconds>(
                                     std::chrono::steady_clock::now() - t0)
                                     .count()}};
  }
  // What the kernel migrated meanwhile (NUMA balancing promotions, say).
  agent::MigrationCounter migrations(paths);
  const bool counting = migrations.probe().ok && migrations.start().has_value();
  if (argc == 5) {
    std::ofstream ready(argv[4]);
    if (!ready) {
      std::cerr << "kvtier_source_run: cannot create " << argv[4] << '\n';
      return 1;
    }
  }
  std::map<std::uint64_t, std::uint64_t> pages;
  std::vector<RegionAccess> last_regions;  // the latest aggregation's regions
  std::uint64_t region_events = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    agent::SourceBatch b;
    if (auto ok = src->collect(now_ns(), b); !ok) {
      std::cerr << "kvtier_source_run: " << ok.error().message << '\n';
      return 1;
    }
    for (const auto& s : b.samples) {
      if (s.pid == pid) pages[s.addr] += s.weight;
    }
    for (const auto& r : b.regions) {
      ++region_events;
      // One aggregation's regions share their timestamp closely and arrive in
      // address order: a region starting below the previous one begins a new set.
      if (!last_regions.empty() && r.range.start < last_regions.back().range.start) {
        last_regions.clear();
      }
      last_regions.push_back(r);
    }
  }
  out["pages"] = nlohmann::json::array();
  for (const auto& [addr, w] : pages) out["pages"].push_back({addr, w});
  out["regions"] = nlohmann::json::array();
  for (const auto& r : last_regions) {
    out["regions"].push_back({{"start", r.range.start},
                              {"end", r.range.end},
                              {"nr_accesses", r.nr_accesses},
                              {"max_nr_accesses", r.max_nr_accesses},
                              {"age", r.age},
                              {"pid", r.pid}});
  }
  out["region_events"] = region_events;
  if (damon != nullptr) {
    if (auto fd = damon->forwarded_dropped()) {
      out["stats"] = {{"forwarded", fd->first}, {"dropped", fd->second}};
    }
  }
  if (faults != nullptr) {
    if (auto st = faults->stats()) {
      out["stats"] = {{"events", st->events},
                      {"matched", st->matched},
                      {"prot_faults", st->prot_faults},
                      {"map_full", st->map_full}};
    }
  }
  if (counting) {
    if (auto m = migrations.read()) {
      out["migrations"] = nlohmann::json::object();
      for (std::size_t r = 0; r < agent::kMigrateReasons; ++r) {
        const auto& c = m->by_reason.at(r);
        if (c.calls == 0) continue;
        out["migrations"][std::string(agent::migrate_reason_name(r))] = {
            {"calls", c.calls}, {"succeeded", c.succeeded}, {"failed", c.failed}};
      }
    }
  }
  src->stop();
  std::cout << out.dump() << '\n';
  return 0;
}
