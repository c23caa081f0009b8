#include "agent/daemon/control_protocol.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "agent/daemon/control_server.hpp"

namespace kvtier::agent {
namespace {

using nlohmann::json;

TEST(LineReader, SplitsLinesAcrossChunks) {
  LineReader r(100);
  ASSERT_TRUE(r.append("{\"a\":"));
  EXPECT_FALSE(r.next_line());
  ASSERT_TRUE(r.append("1}\n{\"b\""));
  EXPECT_EQ(r.next_line(), "{\"a\":1}");
  EXPECT_FALSE(r.next_line());
  ASSERT_TRUE(r.append(":2}\r\nx\n"));
  EXPECT_EQ(r.next_line(), "{\"b\":2}");  // CRLF from a hand-typed socat session
  EXPECT_EQ(r.next_line(), "x");
  EXPECT_FALSE(r.next_line());
  EXPECT_EQ(r.pending(), 0U);
}

TEST(LineReader, UnterminatedTailOverLimitPoisons) {
  LineReader r(8);
  EXPECT_TRUE(r.append("12345678"));
  EXPECT_FALSE(r.append("9"));
  EXPECT_TRUE(r.overflowed());
  EXPECT_FALSE(r.append("\n"));
  EXPECT_FALSE(r.next_line());
}

TEST(LineReader, CompleteLineOverLimitPoisons) {
  LineReader r(4);
  EXPECT_FALSE(r.append("123456\nok\n"));
  EXPECT_FALSE(r.next_line());
}

TEST(LineReader, ManyLinesUnderLimitNeverOverflow) {
  LineReader r(16);
  std::string chunk;
  for (int i = 0; i < 1000; ++i) chunk += "0123456789\n";
  ASSERT_TRUE(r.append(chunk));
  int n = 0;
  while (auto line = r.next_line()) {
    EXPECT_EQ(*line, "0123456789");
    ++n;
  }
  EXPECT_EQ(n, 1000);
}

TEST(ControlProtocol, RequestRoundTrip) {
  const std::string line =
      encode_request(ControlRequest{.command = "explain", .args = json{{"pid", 42}}});
  ASSERT_EQ(line.back(), '\n');
  auto req = parse_request(line.substr(0, line.size() - 1));
  ASSERT_TRUE(req) << req.error().message;
  EXPECT_EQ(req->command, "explain");
  EXPECT_EQ(req->args["pid"], 42);
}

TEST(ControlProtocol, RequestWithoutArgsGetsEmptyObject) {
  auto req = parse_request(R"({"command":"status"})");
  ASSERT_TRUE(req);
  EXPECT_TRUE(req->args.is_object());
  EXPECT_TRUE(req->args.empty());
}

TEST(ControlProtocol, MalformedRequestsSayWhy) {
  EXPECT_NE(parse_request("{").error().message.find("not valid JSON"), std::string::npos);
  EXPECT_NE(parse_request("[1]").error().message.find("object"), std::string::npos);
  EXPECT_NE(parse_request(R"({"command":1})").error().message.find("command"), std::string::npos);
  EXPECT_NE(parse_request(R"({"command":"x","args":3})").error().message.find("args"),
            std::string::npos);
}

// Issue 13: explain with pid 4294967297 acted on pid 1; heatmap ignored
// bins -5 and "x" without a word.
TEST(ControlProtocol, IntegerArgumentsAreRangeCheckedBeforeNarrowing) {
  auto pid = integer_arg(json{{"pid", 4294967297ULL}}, "pid", std::nullopt, 1, 4194304);
  ASSERT_FALSE(pid);
  EXPECT_EQ(pid.error().message, "argument 'pid' is 4294967297, not an integer from 1 to 4194304");
  EXPECT_FALSE(integer_arg(json{{"pid", -1}}, "pid", std::nullopt, 1, 4194304));
  EXPECT_FALSE(integer_arg(json{{"pid", 0}}, "pid", std::nullopt, 1, 4194304));
  EXPECT_FALSE(integer_arg(json{{"pid", 18446744073709551615ULL}}, "pid", std::nullopt, 1, 9));
  EXPECT_FALSE(integer_arg(json{{"pid", 1.5}}, "pid", std::nullopt, 1, 9));
  EXPECT_EQ(integer_arg(json{{"pid", 4242}}, "pid", std::nullopt, 1, 4194304).value(), 4242);
  EXPECT_EQ(integer_arg(json::object(), "pid", std::nullopt, 1, 9).error().message,
            "missing integer argument 'pid'");
  EXPECT_EQ(integer_arg(json::object(), "bins", 64, 1, 4096).value(), 64);
  auto bins = integer_arg(json{{"bins", -5}}, "bins", 64, 1, 4096);
  ASSERT_FALSE(bins);
  EXPECT_EQ(bins.error().message, "argument 'bins' is -5, not an integer from 1 to 4096");
  bins = integer_arg(json{{"bins", "x"}}, "bins", 64, 1, 4096);
  ASSERT_FALSE(bins);
  EXPECT_EQ(bins.error().message, "argument 'bins' is \"x\", not an integer from 1 to 4096");
  EXPECT_THAT(integer_arg(json{{"bins", std::string(1000, 'y')}}, "bins", 64, 1, 4096)
                  .error()
                  .message.size(),
              ::testing::Lt(120U));
}

TEST(ControlProtocol, ResponsesOkErrorAndGarbage) {
  auto ok = parse_response(encode_ok(json{{"steps", 3}}));
  ASSERT_TRUE(ok);
  EXPECT_EQ((*ok)["steps"], 3);
  auto err = parse_response(encode_error("permission denied: uid 65534"));
  ASSERT_FALSE(err);
  EXPECT_EQ(err.error().message, "permission denied: uid 65534");
  auto garbage = parse_response("HTTP/1.1 400");
  ASSERT_FALSE(garbage);
  EXPECT_NE(garbage.error().message.find("malformed"), std::string::npos);
}

TEST(ControlProtocol, InvalidUtf8InResultIsReplacedNotThrown) {
  const std::string bad = "comm\xff\xfe";
  const std::string line = encode_ok(json{{"comm", bad}});
  EXPECT_TRUE(parse_response(line));
}

TEST(PeerCheck, RootDaemonUserAndGroupMembersOnly) {
  const uid_t daemon_uid = 990;
  const gid_t sock_gid = 991;
  EXPECT_TRUE(check_peer(PeerCred{.pid = 1, .uid = 0, .gid = 0}, daemon_uid, sock_gid, "kvtier"));
  EXPECT_TRUE(check_peer(PeerCred{.pid = 1, .uid = 990, .gid = 5}, daemon_uid, sock_gid, "kvtier"));
  EXPECT_TRUE(
      check_peer(PeerCred{.pid = 1, .uid = 1000, .gid = 991}, daemon_uid, sock_gid, "kvtier"));
  EXPECT_TRUE(check_peer(PeerCred{.pid = 1, .uid = 1000, .gid = 1000, .groups = {27, 991}},
                         daemon_uid, sock_gid, "kvtier"));
  auto denied = check_peer(PeerCred{.pid = 77, .uid = 1000, .gid = 1000, .groups = {27}},
                           daemon_uid, sock_gid, "kvtier");
  ASSERT_FALSE(denied);
  EXPECT_EQ(denied.error().message,
            "permission denied: uid 1000 (pid 77) is not root, kvtierd's user or a member of "
            "group kvtier");
}

// Issue 14: a missing group is one line naming the key and the two ways out.
TEST(SocketOptions, MissingGroupNamesTheKeyAndWhatToDo) {
  auto r = check_socket_options(
      ControlSocketOptions{.path = "/run/kvtier-none/k.sock", .group = "no-such-kvtier-group"});
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().message,
            "[telemetry] socket_group = \"no-such-kvtier-group\": no such group; create it "
            "(groupadd --system no-such-kvtier-group; the kvtier package creates it through "
            "sysusers.d) or set socket_group to an existing group, e.g. \"root\"");
  EXPECT_TRUE(check_socket_options(
      ControlSocketOptions{.path = "/run/kvtier-none/k.sock", .group = "root"}));
}

}  // namespace
}  // namespace kvtier::agent
