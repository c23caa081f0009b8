// The load generator's pure logic (bench/loadgen): a trace's conversations and their growing
// prompts, the /completion request, llama-server's responses and metrics, and the KV buffer's
// ground truth per page.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "bench/kvsim/trace.hpp"
#include "bench/loadgen/conversation.hpp"
#include "bench/loadgen/http.hpp"
#include "bench/loadgen/procstat.hpp"
#include "bench/loadgen/truth.hpp"

namespace kvtier::bench::loadgen {
namespace {

using ::testing::HasSubstr;

Trace mooncake(const std::string& text) {
  std::istringstream in(text);
  auto t = parse_mooncake(in, "mem.jsonl");
  EXPECT_TRUE(t) << t.error().message;
  return t ? *t : Trace{};
}

// Three requests: two turns of conversation 0 (the second adds block 7 past the shared [0, 1])
// and one of conversation 5.
const char* const kTrace =
    R"({"timestamp": 0, "input_length": 1000, "output_length": 40, "hash_ids": [0, 1]})"
    "\n"
    R"({"timestamp": 500, "input_length": 600, "output_length": 1, "hash_ids": [5, 6]})"
    "\n"
    R"({"timestamp": 2000, "input_length": 1500, "output_length": 400, "hash_ids": [0, 1, 7]})"
    "\n";

TEST(Loadgen, MooncakeTurnsShareTheirFirstBlock) {
  const auto convs = conversations_from_trace(
      mooncake(kTrace),
      {.max_conversations = 0, .min_turns = 1, .output_scale = 8, .max_predict = 16, .from_s = 0});
  ASSERT_EQ(convs.size(), 2U);
  EXPECT_EQ(convs[0].id, 0U);
  ASSERT_EQ(convs[0].turns.size(), 2U);
  EXPECT_EQ(convs[0].turns[0].new_blocks, (std::vector<std::uint64_t>{0, 1}));
  EXPECT_EQ(convs[0].turns[1].new_blocks, (std::vector<std::uint64_t>{7}));  // past the prefix
  EXPECT_DOUBLE_EQ(convs[0].turns[1].at_s, 2.0);
  EXPECT_EQ(convs[0].turns[1].line, 3U);
  EXPECT_EQ(convs[0].turns[0].n_predict, 5U);   // 40 / 8
  EXPECT_EQ(convs[0].turns[1].n_predict, 16U);  // 400 / 8, capped
  EXPECT_EQ(convs[1].id, 5U);
  EXPECT_EQ(convs[1].turns[0].n_predict, 1U);  // at least one token
}

TEST(Loadgen, SelectsByTurnsStartAndCount) {
  const Trace t = mooncake(kTrace);
  auto convs = conversations_from_trace(t, {.max_conversations = 0, .min_turns = 2});
  ASSERT_EQ(convs.size(), 1U);
  EXPECT_EQ(convs[0].id, 0U);
  convs = conversations_from_trace(t, {.max_conversations = 0, .min_turns = 1, .from_s = 0.1});
  ASSERT_EQ(convs.size(), 1U);
  EXPECT_EQ(convs[0].id, 5U);
  convs = conversations_from_trace(t, {.max_conversations = 1, .min_turns = 1});
  ASSERT_EQ(convs.size(), 1U);
  EXPECT_EQ(convs[0].id, 0U);
}

TEST(Loadgen, AzureRequestsShareNothing) {
  std::istringstream in(
      "TIMESTAMP,ContextTokens,GeneratedTokens\n"
      "2023-11-16 18:15:46.0000000,1024,10\n"
      "2023-11-16 18:15:47.0000000,1024,10\n");
  auto t = parse_azure(in, "mem.csv");
  ASSERT_TRUE(t) << t.error().message;
  const auto convs = conversations_from_trace(*t, {.max_conversations = 0});
  ASSERT_EQ(convs.size(), 2U);
  ASSERT_EQ(convs[0].turns[0].new_blocks.size(), 2U);  // 1024 tokens: two blocks
  for (const auto id : convs[0].turns[0].new_blocks) {
    EXPECT_THAT(convs[1].turns[0].new_blocks, ::testing::Not(::testing::Contains(id)));
  }
}

TEST(Loadgen, PromptsGrowTurnByTurn) {
  EXPECT_EQ(block_text(7, 32), block_text(7, 32));
  EXPECT_NE(block_text(7, 32), block_text(8, 32));
  EXPECT_EQ(block_text(7, 32).size(), 32U);
  const Turn first{.new_blocks = {0, 1}};
  const Turn second{.new_blocks = {7}};
  const std::string p1 = next_prompt("", "", first, 4);
  EXPECT_EQ(p1, block_text(0, 4) + block_text(1, 4));
  const std::string p2 = next_prompt(p1, "Ab\n\x01\xff 9\"", second, 4);
  EXPECT_EQ(p2, p1 + "Ab 9" + block_text(7, 4));  // the completion's printable part kept
  EXPECT_EQ(printable("x\ty-z 1"), "xyz 1");
}

TEST(Loadgen, CompletionRequest) {
  const std::string body = completion_body({.prompt = "a \"b\"\n", .n_predict = 3});
  const auto j = nlohmann::json::parse(body);
  EXPECT_EQ(j["prompt"], "a \"b\"\n");
  EXPECT_EQ(j["n_predict"], 3);
  EXPECT_EQ(j["cache_prompt"], true);
  EXPECT_EQ(j["temperature"], 0.0);
  EXPECT_EQ(j["id_slot"], -1);
  const std::string req = http_request("POST", "/completion", "127.0.0.1", body);
  EXPECT_THAT(req, ::testing::StartsWith("POST /completion HTTP/1.1\r\nHost: 127.0.0.1\r\n"));
  EXPECT_THAT(req, HasSubstr("Connection: close\r\n"));
  EXPECT_THAT(req, HasSubstr("Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body));
  EXPECT_THAT(http_request("GET", "/metrics", "h", ""), ::testing::EndsWith("close\r\n\r\n"));
}

TEST(Loadgen, HttpResponses) {
  auto r = parse_http_response("HTTP/1.1 200 OK\r\nContent-Length: 2\r\nX-A:  b \r\n\r\n{}junk");
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->body, "{}");
  EXPECT_EQ(r->headers["x-a"], "b");
  r = parse_http_response(
      "HTTP/1.1 503 Busy\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2;x\r\nde\r\n0\r\n\r\n");
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->status, 503);
  EXPECT_EQ(r->body, "abcde");
  r = parse_http_response("HTTP/1.1 200 OK\r\n\r\nto the end");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->body, "to the end");
  EXPECT_THAT(parse_http_response("HTTP/1.1 200 OK\r\n").error().message,
              HasSubstr("no end of headers"));
  EXPECT_THAT(parse_http_response("SSH-2.0\r\n\r\n").error().message, HasSubstr("bad status line"));
  EXPECT_THAT(parse_http_response("HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\nab").error().message,
              HasSubstr("Content-Length 9 but 2 B"));
  EXPECT_THAT(parse_http_response("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n")
                  .error()
                  .message,
              HasSubstr("not hexadecimal"));
}

TEST(Loadgen, CompletionResponses) {
  auto c = parse_completion(
      R"({"content":"x y","tokens":[5,6],"id_slot":3,"tokens_cached":120,
          "timings":{"cache_n":100,"prompt_n":4,"prompt_ms":800.5,"predicted_n":16,
                     "predicted_ms":4000,"predicted_per_second":4.0}})");
  ASSERT_TRUE(c) << c.error().message;
  EXPECT_EQ(c->content, "x y");
  EXPECT_EQ(c->tokens, "5,6");
  EXPECT_EQ(c->id_slot, 3);
  EXPECT_EQ(c->tokens_cached, 120);
  EXPECT_EQ(c->cache_n, 100);
  EXPECT_EQ(c->prompt_n, 4);
  EXPECT_DOUBLE_EQ(c->prompt_ms, 800.5);
  EXPECT_EQ(c->predicted_n, 16);
  EXPECT_DOUBLE_EQ(c->predicted_per_second, 4.0);
  EXPECT_THAT(parse_completion("<html>").error().message, HasSubstr("not a JSON object"));
  EXPECT_THAT(
      parse_completion(R"({"error":{"code":503,"message":"Loading model"}})").error().message,
      HasSubstr("Loading model"));
  EXPECT_THAT(parse_completion(R"({"content":"x"})").error().message, HasSubstr("id_slot"));
}

TEST(Loadgen, Metrics) {
  const auto m = parse_metrics(
      "# HELP llamacpp:prompt_tokens_total Number of prompt tokens processed.\n"
      "# TYPE llamacpp:prompt_tokens_total counter\n"
      "llamacpp:prompt_tokens_total 412\n"
      "llamacpp:kv_cache_usage_ratio 0.25\r\n"
      "bad line\n"
      "x{a=\"b c\"} 1e3\n");
  EXPECT_EQ(m.size(), 3U);
  EXPECT_DOUBLE_EQ(m.at("llamacpp:prompt_tokens_total"), 412);
  EXPECT_DOUBLE_EQ(m.at("llamacpp:kv_cache_usage_ratio"), 0.25);
  EXPECT_DOUBLE_EQ(m.at("x{a=\"b c\"}"), 1000);
}

// A listening socket on 127.0.0.1 and an ephemeral port.
struct Listener {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  std::uint16_t port = 0;
  Listener() {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    // NOLINTBEGIN(cppcoreguidelines-pro-type-reinterpret-cast): the sockets API
    EXPECT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    EXPECT_EQ(::listen(fd, 1), 0);
    EXPECT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len), 0);
    // NOLINTEND(cppcoreguidelines-pro-type-reinterpret-cast)
    port = ntohs(a.sin_port);
  }
  ~Listener() { ::close(fd); }
  Listener(const Listener&) = delete;
  Listener& operator=(const Listener&) = delete;
};

TEST(Loadgen, ExchangeOverLoopback) {
  Listener l;
  std::string seen;
  std::jthread server([&] {
    const int c = ::accept(l.fd, nullptr, nullptr);
    char buf[4096];
    while (seen.find("\r\n\r\n{}") == std::string::npos) {
      const ssize_t n = ::read(c, buf, sizeof buf);
      if (n <= 0) break;
      seen.append(buf, static_cast<std::size_t>(n));
    }
    const std::string reply =
        "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n";
    EXPECT_EQ(::write(c, reply.data(), reply.size()), static_cast<ssize_t>(reply.size()));
    ::close(c);
  });
  const std::string req = http_request("POST", "/completion", "127.0.0.1", "{}");
  auto raw = http_exchange(l.port, req, std::chrono::seconds(60));
  server.join();
  ASSERT_TRUE(raw) << raw.error().message;
  EXPECT_EQ(seen, req);
  auto res = parse_http_response(*raw);
  ASSERT_TRUE(res) << res.error().message;
  EXPECT_EQ(res->body, "ok");
}

TEST(Loadgen, ExchangeTimesOutAndRefuses) {
  Listener l;  // accepts (the backlog) but never answers
  auto r = http_exchange(l.port, http_request("GET", "/metrics", "h", ""),
                         std::chrono::milliseconds(50));
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ETIMEDOUT);
  EXPECT_THAT(r.error().message, HasSubstr("within 50 ms"));
  const std::uint16_t closed = l.port;
  ::close(l.fd);
  l.fd = -1;
  r = http_exchange(closed, "GET / HTTP/1.1\r\n\r\n", std::chrono::seconds(60));
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ECONNREFUSED);
  EXPECT_THAT(r.error().message, HasSubstr("127.0.0.1:" + std::to_string(closed)));
}

// 1 layer, 2 slots of 8 cells of 1 KiB: K = [slot 0: 8 KiB][slot 1: 8 KiB], then V the same,
// 32 KiB from 64 bytes into the first page: 9 pages, the last holding 64 bytes.
constexpr KvLayout kSmall{.data = 0x10040, .layers = 1, .slots = 2, .cells = 8, .row_bytes = 1024};

TEST(Loadgen, TruthClassifiesPagesBySlot) {
  ASSERT_EQ(kSmall.pages(), 9U);
  // Slot 0 answered 2 s ago holding 5 cells (5 KiB from 0x10040: pages 0 and 1), slot 1 answered
  // 60 s ago holding 1 cell (1 KiB from 0x12040: page 2, which slot 0's last bytes also reach).
  const std::vector<SlotState> slots = {{.cells = 5, .last_answer_s = 98},
                                        {.cells = 1, .last_answer_s = 40}};
  const auto c = classify_pages(kSmall, slots, 100, 10);
  using P = PageClass;
  // K: page 0-1 slot 0's cells; page 2 slot 0's unused last bytes and slot 1's cell; 3-4 unused.
  // V from 0x14040: page 4 holds slot 0's first cells too.
  EXPECT_EQ(c, (std::vector<P>{P::kActive, P::kActive, P::kIdle, P::kUnused, P::kActive, P::kActive,
                               P::kIdle, P::kUnused, P::kUnused}));
  // All idle after the cold age; a busy slot is active whatever its age.
  const std::vector<SlotState> later = {{.cells = 5, .last_answer_s = 98},
                                        {.cells = 1, .last_answer_s = 40, .busy = true}};
  const auto d = classify_pages(kSmall, later, 200, 10);
  EXPECT_EQ(d[0], P::kIdle);
  EXPECT_EQ(d[2], P::kActive);
  // Cells beyond the stream are clamped to it.
  const std::vector<SlotState> full = {{.cells = 99, .last_answer_s = 0}, {}};
  const auto f = classify_pages(kSmall, full, 0, 10);
  EXPECT_EQ(f[1], P::kActive);
  EXPECT_EQ(f[2], P::kActive);  // slot 0's last 64 bytes
  EXPECT_EQ(f[3], P::kUnused);
}

TEST(Loadgen, TruthTalliesByNode) {
  const std::vector<SlotState> slots = {{.cells = 5, .last_answer_s = 98},
                                        {.cells = 1, .last_answer_s = 40}};
  const auto c = classify_pages(kSmall, slots, 100, 10);
  // Pages 0-3 on node 0, 4-6 on node 1, 7 not present, 8 outside every run.
  const std::vector<NodeRun> runs = {{.start = 0x10000, .end = 0x14000, .node = 0},
                                     {.start = 0x14000, .end = 0x17000, .node = 1},
                                     {.start = 0x17000, .end = 0x18000, .node = -1}};
  const ClassBytes b = tally(kSmall, c, runs);
  EXPECT_EQ(b.on(PageClass::kActive, 0), 2 * kTruthPage);
  EXPECT_EQ(b.on(PageClass::kActive, 1), 2 * kTruthPage);
  EXPECT_EQ(b.on(PageClass::kIdle, 0), kTruthPage);
  EXPECT_EQ(b.on(PageClass::kIdle, 1), kTruthPage);
  EXPECT_EQ(b.on(PageClass::kUnused, 0), kTruthPage);
  EXPECT_EQ(b.on(PageClass::kUnused, -1), 2 * kTruthPage);
  EXPECT_EQ(b.total(PageClass::kActive) + b.total(PageClass::kIdle) + b.total(PageClass::kUnused),
            kSmall.pages() * kTruthPage);
}

TEST(LoadgenProcstat, ParsesSchedstatProcStatAndVmstat) {
  const auto t = parse_schedstat("123456789 2000000 42\n");
  ASSERT_TRUE(t.has_value());
  EXPECT_EQ(t->cpu_ns, 123456789U);
  EXPECT_EQ(t->delay_ns, 2000000U);
  EXPECT_EQ(t->slices, 42U);
  EXPECT_FALSE(parse_schedstat("12 x 3").has_value());
  EXPECT_FALSE(parse_schedstat("").has_value());

  const auto c = parse_proc_stat("cpu  10 1 20 300 4 5 6 0 0 0\ncpu0 10 1 20 300 4 5 6 0 0 0\n");
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->busy(), 10U + 1 + 20 + 5 + 6);
  EXPECT_EQ(c->idle, 300U);
  EXPECT_EQ(c->iowait, 4U);
  EXPECT_FALSE(parse_proc_stat("cpu0 1 2 3 4 5 6 7\n").has_value());

  const auto vm = parse_vmstat("nr_free_pages 9\nnuma_hint_faults 7\npgmigrate_success 5\nbad\n");
  EXPECT_EQ(vm.size(), 2U);
  EXPECT_EQ(vm.at("numa_hint_faults"), 7U);
  EXPECT_EQ(vm.at("pgmigrate_success"), 5U);
}

TEST(LoadgenProcstat, WindowIsTheDifferenceOfTwoSnapshots) {
  ProcSnapshot a;
  a.server_ok = true;
  a.server = {.cpu_ns = 1'000'000, .delay_ns = 0, .slices = 1};
  a.cpu = {.user = 10, .system = 5, .idle = 100, .softirq = 1};
  a.vm = {{"pgmigrate_success", 10}, {"numa_hint_faults", 3}};
  ProcSnapshot b = a;
  b.server = {.cpu_ns = 6'000'000, .delay_ns = 2'500'000, .slices = 4};
  b.cpu = {.user = 14, .system = 7, .idle = 103, .softirq = 2};
  b.vm = {{"pgmigrate_success", 266}, {"numa_hint_faults", 3}, {"pgfault", 1}};
  const auto j = window_json(a, b, 100);
  EXPECT_DOUBLE_EQ(j.at("server_cpu_ms").get<double>(), 5.0);
  EXPECT_DOUBLE_EQ(j.at("server_delay_ms").get<double>(), 2.5);
  EXPECT_DOUBLE_EQ(j.at("busy_ms").get<double>(), 70.0);  // 4 + 2 + 1 ticks of 10 ms
  EXPECT_DOUBLE_EQ(j.at("idle_ms").get<double>(), 30.0);
  EXPECT_DOUBLE_EQ(j.at("system_ms").get<double>(), 20.0);
  EXPECT_DOUBLE_EQ(j.at("softirq_ms").get<double>(), 10.0);
  EXPECT_FALSE(j.contains("watch_cpu_ms"));  // no watched process
  EXPECT_EQ(j.at("vm").at("pgmigrate_success").get<int>(), 256);
  EXPECT_EQ(j.at("vm").at("numa_hint_faults").get<int>(), 0);
  EXPECT_FALSE(j.at("vm").contains("pgfault"));  // not in the first snapshot
}

TEST(LoadgenProcstat, SnapshotOfThisProcessCountsItsOwnCpu) {
  const ProcSnapshot s = take_snapshot(static_cast<int>(getpid()), 0);
  EXPECT_TRUE(s.server_ok);
  EXPECT_FALSE(s.watch_ok);
  EXPECT_GT(s.server.cpu_ns, 0U);
  EXPECT_GT(s.self.cpu_ns, 0U);
  EXPECT_GT(s.cpu.busy() + s.cpu.idle, 0U);
}

}  // namespace
}  // namespace kvtier::bench::loadgen
