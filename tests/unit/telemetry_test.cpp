#include "agent/telemetry/telemetry.hpp"

#include <gtest/gtest.h>

#include "agent/daemon/daemon_settings.hpp"
#include "agent/daemon/prometheus_exporter.hpp"
#include "policy/config.hpp"

namespace kvtier::agent {
namespace {

using nlohmann::json;

const json* find_series(const json& family, const MetricLabels& labels) {
  for (const auto& s : family["series"]) {
    if (s["labels"] == json(labels)) return &s;
  }
  return nullptr;
}

TEST(Telemetry, CountersAddGaugesReplace) {
  Telemetry t;
  t.add("kvtier_source_samples_total", {{"source", "pmu"}}, 5);
  t.add("kvtier_source_samples_total", {{"source", "pmu"}}, 7);
  t.set("kvtier_plan_moves", {}, 3);
  t.set("kvtier_plan_moves", {}, 1);
  EXPECT_EQ(t.value("kvtier_source_samples_total", {{"source", "pmu"}}), 12);
  EXPECT_EQ(t.value("kvtier_plan_moves"), 1);
  EXPECT_EQ(t.value("kvtier_source_samples_total", {{"source", "damon"}}), 0);
}

TEST(Telemetry, MovesAreLabelledByStatusAndNode) {
  Telemetry t;
  t.record_moves(
      MoveStats{.requested = 10, .moved = 6, .busy = 3, .gone = 1, .bytes_moved = 6 * kPageSize},
      1);
  const json j = t.to_json();
  const auto& fam = j["kvtier_page_moves_total"];
  EXPECT_EQ(fam["type"], "counter");
  ASSERT_NE(find_series(fam, {{"status", "moved"}, {"node", "1"}}), nullptr);
  EXPECT_EQ((*find_series(fam, {{"status", "moved"}, {"node", "1"}}))["value"], 6.0);
  EXPECT_EQ((*find_series(fam, {{"status", "busy"}, {"node", "1"}}))["value"], 3.0);
  EXPECT_EQ((*find_series(fam, {{"status", "gone"}, {"node", "1"}}))["value"], 1.0);
  // Outcomes that did not happen make no series (no wall of zeros in dumps).
  EXPECT_EQ(find_series(fam, {{"status", "pinned"}, {"node", "1"}}), nullptr);
  EXPECT_EQ(t.value("kvtier_moved_bytes_total", {{"node", "1"}}), 6.0 * kPageSize);
}

TEST(Telemetry, HistogramBucketsAreCumulativeInJson) {
  Telemetry t;
  t.record_step(std::chrono::microseconds(300), true);  // <= 0.0005
  t.record_step(std::chrono::milliseconds(3), true);    // <= 0.005
  t.record_step(std::chrono::seconds(10), false);       // +Inf
  const json h = t.to_json()["kvtier_loop_duration_seconds"];
  EXPECT_EQ(h["type"], "histogram");
  const auto& s = h["series"][0];
  EXPECT_EQ(s["count"], 3);
  EXPECT_NEAR(s["sum"].get<double>(), 10.0033, 1e-9);
  const auto& b = s["buckets"];
  EXPECT_EQ(b[0]["le"], 0.0005);
  EXPECT_EQ(b[0]["count"], 1);
  EXPECT_EQ(b[3]["le"], 0.005);
  EXPECT_EQ(b[3]["count"], 2);
  EXPECT_EQ(b.back()["le"], "+Inf");
  EXPECT_EQ(b.back()["count"], 3);
  EXPECT_EQ(t.value("kvtier_loop_steps_total", {{"result", "ok"}}), 2);
  EXPECT_EQ(t.value("kvtier_loop_steps_total", {{"result", "error"}}), 1);
}

TEST(Telemetry, ResidencyIsReplacedEachTime) {
  Telemetry t;
  t.set_residency({{100, {{0, 4096}, {1, 8192}}}, {200, {{0, 1}}}});
  t.set_residency({{100, {{1, 12288}}}});
  const json fam = t.to_json()["kvtier_target_resident_bytes"];
  ASSERT_EQ(fam["series"].size(), 1U);  // pid 200 exited: its series is gone
  EXPECT_EQ(t.value("kvtier_target_resident_bytes", {{"pid", "100"}, {"node", "1"}}), 12288);
}

TEST(Telemetry, PlanGauges) {
  Telemetry t;
  Plan p;
  p.moves.resize(4);
  p.demote_bytes = 1 << 20;
  p.promote_bytes = 4096;
  t.record_plan(p);
  EXPECT_EQ(t.value("kvtier_plan_moves"), 4);
  EXPECT_EQ(t.value("kvtier_plan_bytes", {{"direction", "demote"}}), 1 << 20);
  EXPECT_EQ(t.value("kvtier_plan_bytes", {{"direction", "promote"}}), 4096);
}

TEST(ListenAddress, LoopbackClassification) {
  auto v4 = parse_listen_address("127.0.0.1:9464");
  ASSERT_TRUE(v4) << v4.error().message;
  EXPECT_TRUE(v4->loopback);
  EXPECT_EQ(v4->port, 9464);
  auto v6 = parse_listen_address("[::1]:0");
  ASSERT_TRUE(v6) << v6.error().message;
  EXPECT_TRUE(v6->loopback);
  EXPECT_FALSE(parse_listen_address("0.0.0.0:9464")->loopback);
  EXPECT_FALSE(parse_listen_address("[::]:9464")->loopback);
  EXPECT_FALSE(parse_listen_address("10.1.2.3:80")->loopback);
  for (const char* bad :
       {"9464", "localhost:9464", "127.0.0.1:", "127.0.0.1:70000", "[::1]9464", "127.0.0.1:9x"}) {
    auto r = parse_listen_address(bad);
    ASSERT_FALSE(r) << bad;
    EXPECT_NE(r.error().message.find(bad), std::string::npos) << r.error().message;
  }
}

TEST(DaemonSettings, DefaultsAreValid) {
  EXPECT_TRUE(validate_settings(DaemonSettings{}));
}

TEST(DaemonSettings, EveryProblemIsOneLine) {
  auto r = validate_settings(DaemonSettings{.socket_path = "relative.sock",
                                            .socket_mode = 01777,
                                            .prometheus_enabled = true,
                                            .prometheus_listen = "0.0.0.0:9464",
                                            .interval = std::chrono::milliseconds(0),
                                            .log_level = "loud"});
  ASSERT_FALSE(r);
  const auto& m = r.error().message;
  EXPECT_EQ(std::count(m.begin(), m.end(), '\n'), 4) << m;
  EXPECT_NE(m.find("relative.sock"), std::string::npos);
  EXPECT_NE(m.find("1777"), std::string::npos);
  EXPECT_NE(m.find("0.0.0.0:9464\" is not a loopback address"), std::string::npos);
  EXPECT_NE(m.find("interval"), std::string::npos);
  EXPECT_NE(m.find("\"loud\""), std::string::npos);
}

TEST(DaemonSettings, NonLoopbackOnlyWhenAllowed) {
  DaemonSettings s{.prometheus_enabled = true, .prometheus_listen = "0.0.0.0:9464"};
  auto r = validate_settings(s);
  ASSERT_FALSE(r);
  // Both keys named are ones the config file has (issue 14: it named a key that did not exist).
  EXPECT_EQ(r.error().message,
            "[telemetry] prometheus_listen = \"0.0.0.0:9464\" is not a loopback address: metrics "
            "name processes and memory layout; use 127.0.0.1:PORT or [::1]:PORT, or set "
            "[telemetry] prometheus_allow_non_loopback = true to serve them there on purpose (a "
            "pod's address)");
  const auto cfg = policy::parse_config(
      "[telemetry]\nprometheus_listen = \"0.0.0.0:1\"\nprometheus_allow_non_loopback = true\n"
      "[[group]]\nname = \"g\"\n[group.select]\ncomm = [\"^x$\"]\n",
      "t");
  ASSERT_TRUE(cfg) << "the keys the message names exist: " << cfg.error().front().to_string();
  EXPECT_TRUE(cfg->telemetry.prometheus_allow_non_loopback);
  s.prometheus_allow_non_loopback = true;
  EXPECT_TRUE(validate_settings(s));
  // Off: the address is not used, so not judged.
  EXPECT_TRUE(validate_settings(DaemonSettings{.prometheus_listen = "0.0.0.0:1"}));
}

}  // namespace
}  // namespace kvtier::agent
