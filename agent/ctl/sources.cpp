#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "agent/ctl/command.hpp"
#include "agent/host/availability.hpp"
#include "agent/host/host_paths.hpp"
#include "agent/sources/migration_counter.hpp"
#include "agent/sources/process_watcher.hpp"
#include "agent/sources/source_registry.hpp"
#include "policy/config.hpp"
#include "policy/types.hpp"

namespace kvtier::agent::ctl {

void add_sources_command(CLI::App& app, Globals& g) {
  auto json = std::make_shared<bool>(false);
  auto* cmd = app.add_subcommand(
      "sources",
      "List the hotness sources (PMU, DAMON, faults, ...): whether each can run on this host and "
      "why not, and which ones kvtierd runs with the default sources.use");
  cmd->add_flag("--json", *json, "Print JSON instead of a table");
  cmd->callback([&g, json] {
    const HostPaths paths = g.paths();
    SourceRegistry reg;
    register_builtin_sources(reg, paths, SourceOptions{});
    const auto reports = probe_sources(reg);
    auto choice = select_sources(reg, {}, std::nullopt);
    std::vector<std::string> chosen;
    std::vector<SourceKind> running;
    if (choice) {
      for (const auto& c : choice->sources) {
        chosen.emplace_back(c.source->name());
        running.push_back(c.source->kind());
      }
    }
    const std::string reason = choice ? choice->summary : choice.error().message;
    // Whether DAMON would stand by beside what kvtierd would run, with the default
    // [tiering] (normal balancing on: hint faults see DRAM).
    const auto runs = [&](SourceKind k) { return std::ranges::find(running, k) != running.end(); };
    const bool standby = runs(SourceKind::kDamon) && !damon_standby_reason(running, true).empty();
    const std::string standby_note =
        runs(SourceKind::kPmu)
            ? "damon stands by while pmu runs (docs/configuration.md, [sources])"
            : "damon stands by while the NUMA hint faults see DRAM pages too: with "
              "[tiering] numa_balancing = \"tiering\" (the default) or the host's "
              "kernel.numa_balancing bit 1 (docs/configuration.md, [sources])";
    const std::string dirty_why = dirty_standby_reason(running, true);
    const bool dirty_standby = runs(SourceKind::kSoftDirty) && !dirty_why.empty();
    const std::string dirty_note =
        "dirty stands by while " + dirty_why +
        ": its write faults would cost the workload (docs/configuration.md, [sources])";
    const Availability procs = ProcessWatcher(paths).probe();
    const Availability migrate = MigrationCounter(paths).probe();

    if (*json) {
      nlohmann::json j;
      j["sources"] = nlohmann::json::array();
      for (const auto& r : reports) {
        j["sources"].push_back({{"name", policy::source_name(r.kind)},
                                {"summary", r.summary},
                                {"available", r.availability.ok},
                                {"why", r.availability.why}});
      }
      j["chosen"] = chosen;
      j["reason"] = reason;
      j["damon_standby"] = standby ? nlohmann::json(standby_note) : nlohmann::json(nullptr);
      j["dirty_standby"] = dirty_standby ? nlohmann::json(dirty_note) : nlohmann::json(nullptr);
      j["process_watcher"] = {{"available", procs.ok}, {"why", procs.why}};
      j["migration_counter"] = {{"available", migrate.ok}, {"why", migrate.why}};
      std::cout << j.dump(2) << '\n';
    } else {
      std::cout << fmt::format("{:<10} {:<10} {}\n", "SOURCE", "AVAILABLE", "WHY");
      for (const auto& r : reports) {
        std::cout << fmt::format("{:<10} {:<10} {}\n", policy::source_name(r.kind),
                                 r.availability.ok ? "yes" : "no", r.availability.why);
      }
      std::cout << fmt::format("\nprocess watcher: {}\nmigration counter: {}\n", procs.why,
                               migrate.why);
      std::cout << fmt::format("kvtierd would run {}\n", reason);
      if (standby) std::cout << standby_note << '\n';
      if (dirty_standby) std::cout << dirty_note << '\n';
    }
    if (!choice) g.exit_code = kExitFailed;
  });
}

}  // namespace kvtier::agent::ctl
