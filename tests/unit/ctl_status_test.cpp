// `kvtierctl status` as a person reads it, from status replies written here
// (the daemon's real replies are checked by the privileged daemon tests).

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "agent/ctl/status_report.hpp"

namespace kvtier::agent::ctl {
namespace {

using nlohmann::json;
using testing::HasSubstr;
using testing::Not;

std::string printed(const json& st) {
  testing::internal::CaptureStdout();
  print_status(st);
  return testing::internal::GetCapturedStdout();
}

json reply() {
  return {
      {"version", "1.0"},
      {"pid", 42},
      {"uptime_seconds", 75.0},
      {"paused", false},
      {"steps", 75},
      {"reloads", 2},
      {"reloads_rejected", 1},
      {"last_reload", {{"seconds_ago", 12.0}, {"applied", false}}},
      {"last_reload_errors", {"/etc/kvtier/kvtier.toml: mover.kind changed and needs a restart"}},
      {"socket", "/run/kvtier/kvtierd.sock"},
      {"loop",
       {{"sources",
         {{{"name", "damon"}, {"reason", "ok: DAMON vaddr regions via damon:damon_aggregated"}},
          {{"name", "faults"}, {"reason", "ok: NUMA hint faults"}}}},
        {"mover", "move_pages"},
        {"activity",
         {{"moves_last_minute", 3},
          {"moved_bytes_last_minute", 3 << 20},
          {"last_move_seconds_ago", 4.0}}},
        {"degraded",
         {"tiering knobs not set: no CAP_SYS_ADMIN",
          "node 1 full: a demotion there found "
          "no free memory 5 s ago"}}}}};
}

TEST(Status, SaysWhatRunsWhyWhetherMovesHappenAndWhatIsDegraded) {
  const std::string out = printed(reply());
  EXPECT_THAT(out, HasSubstr("  sources     damon (ok: DAMON vaddr regions via "
                             "damon:damon_aggregated); faults (ok: NUMA hint faults)\n"));
  EXPECT_THAT(out, HasSubstr("  mover       move_pages (mover.kind)\n"));
  EXPECT_THAT(out, HasSubstr("  moves       3 in the last minute (3MiB), last 4s ago\n"));
  EXPECT_THAT(out, HasSubstr("  degraded    tiering knobs not set: no CAP_SYS_ADMIN\n"));
  EXPECT_THAT(out, HasSubstr("  degraded    node 1 full: a demotion there found no free memory"));
  EXPECT_THAT(out, HasSubstr("  reloads     2 (1 rejected), last 12s ago, rejected\n"));
  EXPECT_THAT(out, HasSubstr("  rejected    /etc/kvtier/kvtier.toml: mover.kind changed"));
}

TEST(Status, NothingYetAndObserveOnly) {
  json st = reply();
  st.erase("last_reload");
  st["reloads"] = 0;
  st["reloads_rejected"] = 0;
  st["last_reload_errors"] = json::array();
  st["loop"] = {{"sources", json::array()},
                {"mover", nullptr},
                {"activity", {{"moves_last_minute", 0}, {"last_move_seconds_ago", nullptr}}},
                {"degraded", {"observe-only: no demotion target node on this host"}}};
  const std::string out = printed(st);
  EXPECT_THAT(out, HasSubstr("  sources     none\n"));
  EXPECT_THAT(out, HasSubstr("  mover       none (observe-only)\n"));
  EXPECT_THAT(out, HasSubstr("  moves       0 in the last minute (0B), none yet\n"));
  EXPECT_THAT(out, HasSubstr("  degraded    observe-only: no demotion target node on this host\n"));
  EXPECT_THAT(out, HasSubstr("  reloads     0 (0 rejected)\n"));
  EXPECT_THAT(out, Not(HasSubstr("last 0s ago")));
  EXPECT_THAT(out, Not(HasSubstr("  cpu "))) << "an older daemon says nothing of its CPU";
  EXPECT_THAT(out, Not(HasSubstr("  memory "))) << "nor of its memory";
}

// Who promotes at first access: kvtierd with its return watch, or the fault path.
TEST(Status, SaysWhoPromotes) {
  json st = reply();
  st["loop"]["tiering"] = {{"tiering_mode", true},
                           {"changed", json::array()},
                           {"hot_threshold_ms", 0},
                           {"return_watch", {{"armed", 120}, {"returns", 7}}}};
  EXPECT_THAT(printed(st), HasSubstr("  promotion   by kvtierd, out of the workload's fault path "
                                     "(return watch: 7 touches of 120 chunks armed)\n"));
  st["loop"]["tiering"]["hot_threshold_ms"] = 3600000;
  st["loop"]["tiering"]["return_watch"] = nullptr;
  EXPECT_THAT(printed(st), HasSubstr("  promotion   in the workload's fault path (hot_threshold_ms "
                                     "3600000; no return watch)\n"));
}

// Where kvtierd's CPU went: the process over its uptime, and the loop thread's
// phases largest first, moving pages named as such.
TEST(Status, CpuByPhase) {
  json st = reply();
  st["loop"]["cpu"] = {
      {"process_seconds", 3.0},
      {"loop_seconds", 2.5},
      {"loop_seconds_by_phase",
       {{"discover", 0.1}, {"sources", 0.4}, {"residency", 0.2}, {"plan", 0.05}, {"move", 1.75}}}};
  EXPECT_THAT(printed(st),
              HasSubstr("  cpu         3.0s since start (4.0% of a CPU); loop thread 2.5s: moving "
                        "pages 1.8s, sources 0.4s, residency 0.2s, discover 0.1s, plan 0.1s\n"));
}

// kvtierd's own resident memory, from loop.memory.
TEST(Status, ResidentMemory) {
  json st = reply();
  st["loop"]["memory"] = {{"resident_bytes", 12 * 1024 * 1024 + 512 * 1024}};
  EXPECT_THAT(printed(st), HasSubstr("  memory      12.5MiB resident\n"));
}

}  // namespace
}  // namespace kvtier::agent::ctl
