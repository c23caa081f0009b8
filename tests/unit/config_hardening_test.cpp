// The config parser and the selectors against hostile or broken input: each
// case was a crash, a stall or a silent mistake before (issue 13). Cases that
// used to crash or hang run in a child process with a deadline, so the old
// behaviour fails the test instead of killing the test binary.

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <thread>

#include "fixture.hpp"
#include "policy/config.hpp"

namespace kvtier::policy {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

const std::string kGroup = R"(
[[group]]
name = "vllm"
[group.select]
comm = ["^vllm"]
)";

// How a child running `fn` ended: its exit code (fn's result, 0 or 1), or
// "signal N", or "timeout" when it had not finished within `limit`.
std::string in_child(const std::function<bool()>& fn,
                     std::chrono::seconds limit = std::chrono::seconds(20)) {
  const pid_t pid = fork();
  if (pid == 0) _exit(fn() ? 0 : 1);
  const auto end = std::chrono::steady_clock::now() + limit;
  int st = 0;
  while (std::chrono::steady_clock::now() < end) {
    if (waitpid(pid, &st, WNOHANG) == pid) {
      if (WIFSIGNALED(st)) return "signal " + std::to_string(WTERMSIG(st));
      return WEXITSTATUS(st) == 0 ? "true" : "false";
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  kill(pid, SIGKILL);
  waitpid(pid, &st, 0);
  return "timeout";
}

CompiledConfig compiled(const std::string& text) {
  auto c = compile_config_text(text, "t.toml");
  EXPECT_TRUE(c) << (c ? "" : c.error().front().to_string());
  return c ? std::move(*c) : CompiledConfig{};
}

ConfigProblems problems_of(const std::string& text) {
  auto c = compile_config_text(text, "t.toml");
  return c ? ConfigProblems{} : c.error();
}

// Defect 1: std::regex recursed once per character of a 40 KB argument.
TEST(ConfigHardening, ShippedSelectorOnAHugeCommandLineDoesNotCrash) {
  const std::string path = std::string(KVTIER_SOURCE_DIR) + "/systemd/kvtier.toml";
  auto cc = load_compiled_config(path);
  ASSERT_TRUE(cc);
  const std::string huge(40000, 'x');
  EXPECT_EQ(
      in_child([&] {
        return !cc->group_of({.pid = 9, .comm = "bash", .cmdline = "/python3 " + huge}).has_value();
      }),
      "true");
  // A vLLM launch with a 40 KB chat template still matches.
  EXPECT_EQ(in_child([&] {
              return cc
                  ->group_of({.pid = 9,
                              .comm = "python3",
                              .cmdline = "/usr/bin/python3 -m vllm.entrypoints.openai."
                                         "api_server --chat-template " +
                                         huge})
                  .has_value();
            }),
            "true");
}

// Defect 2: catastrophic backtracking took 45 s a step with std::regex.
TEST(ConfigHardening, BacktrackingPatternMatchesInLinearTime) {
  auto cc = compiled("[[group]]\nname = \"bt\"\n[group.select]\ncmdline = [\"(a+)+$\"]\n");
  const std::string name = std::string(4000, 'a') + "b";
  EXPECT_EQ(in_child([&] { return !cc.group_of({.pid = 9, .cmdline = name}).has_value(); },
                     std::chrono::seconds(10)),
            "true");
  EXPECT_TRUE(cc.group_of({.pid = 9, .cmdline = "xaaaa"}).has_value());
}

// Only the first kMaxCmdlineBytes of a command line are matched.
TEST(ConfigHardening, CommandLineIsMatchedUpToTheBound) {
  auto cc = compiled("[[group]]\nname = \"tail\"\n[group.select]\ncmdline = [\"needle\"]\n");
  const std::string pad(kMaxCmdlineBytes - 6, ' ');
  EXPECT_TRUE(cc.group_of({.pid = 9, .cmdline = pad + "needle"}).has_value());
  EXPECT_FALSE(cc.group_of({.pid = 9, .cmdline = pad + " needle"}).has_value());
}

// The dialect is RE2's: what ECMAScript-only syntax the old matcher took is
// refused with one line naming the key.
TEST(ConfigHardening, PatternsRe2CannotCompileAreNamedByKey) {
  auto p = problems_of(kGroup + "cmdline = [\"ok\", \"(\\\\w+)\\\\1\"]\n");
  ASSERT_EQ(p.size(), 1U);
  EXPECT_EQ(p[0].key, "group[0].select.cmdline[1]");
  EXPECT_THAT(p[0].message, HasSubstr("not a valid regular expression"));
  EXPECT_THAT(p[0].message, HasSubstr("allowed: RE2 regular expressions"));
  p = problems_of("[[group]]\nname = \"v\"\n[group.select]\ncomm = [\"^(?=vllm)\"]\n");
  ASSERT_EQ(p.size(), 1U);
  EXPECT_EQ(p[0].key, "group[0].select.comm[0]");
}

// Byte semantics: a command line that is not UTF-8 is still matched.
TEST(ConfigHardening, NonUtf8CommandLinesMatch) {
  auto cc = compiled("[[group]]\nname = \"v\"\n[group.select]\ncmdline = [\"vllm.*serve\"]\n");
  EXPECT_TRUE(cc.group_of({.pid = 9, .cmdline = "vllm \xff\xfe serve"}).has_value());
}

// Defect 3: toml++ recursed once per dotted key part and died at 40000.
TEST(ConfigHardening, DeepConfigIsOneProblemNotACrash) {
  std::string deep = kGroup + "[a";
  for (int i = 0; i < 40000; ++i) deep += ".a";
  deep += "]\n";
  EXPECT_EQ(in_child([&] {
              auto p = problems_of(deep);
              return p.size() == 1 && p[0].line == 6 &&
                     p[0].message.find("nested more than 32 levels") != std::string::npos;
            }),
            "true");
  EXPECT_EQ(
      in_child([&] { return problems_of(kGroup + "x = " + std::string(5000, '[')).size() == 1; }),
      "true");
  EXPECT_EQ(in_child([&] {
              std::string t = kGroup + "y = ";
              for (int i = 0; i < 5000; ++i) t += "{a=";
              return problems_of(t).size() == 1;
            }),
            "true");
  // Dots and brackets inside strings and comments do not count.
  EXPECT_TRUE(problems_of("# " + std::string(100, '.') + std::string(100, '[') + "\n" + kGroup +
                          "exe = [\"/opt/" + std::string(100, '.') + "\"]\n")
                  .empty());
  EXPECT_TRUE(problems_of("# '''\n" + kGroup + "exe = ['''/a\n" + std::string(100, '[') + "''']\n")
                  .size() == 1);  // one problem: the path is not one line, not the depth
}

TEST(ConfigHardening, FileLimits) {
  testing::Fixture dir;
  dir.mkdir("as_dir.toml");
  auto p = load_config(dir.path("as_dir.toml").string());
  ASSERT_FALSE(p);
  ASSERT_EQ(p.error().size(), 1U);
  EXPECT_THAT(p.error()[0].message, HasSubstr("is a directory"));

  dir.write("big.toml", kGroup + "# " + std::string(kMaxConfigBytes, 'x') + "\n");
  p = load_config(dir.path("big.toml").string());
  ASSERT_FALSE(p);
  ASSERT_EQ(p.error().size(), 1U);
  EXPECT_THAT(p.error()[0].message, HasSubstr("larger than 256KiB"));
  // /dev/zero never ends: the read is bounded.
  p = load_config("/dev/zero");
  ASSERT_FALSE(p);
  EXPECT_THAT(p.error()[0].message, HasSubstr("larger than 256KiB"));
}

// Defect 8: a NUL from "\u0000" cut messages short and reached the C library.
TEST(ConfigHardening, ControlCharactersAreRefusedAndShownEscaped) {
  auto p = problems_of("[telemetry]\nsocket_group = \"kv\\u0000tier\"\n" + kGroup);
  ASSERT_EQ(p.size(), 1U);
  EXPECT_EQ(p[0].key, "telemetry.socket_group");
  EXPECT_THAT(p[0].message, HasSubstr("control character"));
  const std::string line = p[0].to_string();
  EXPECT_EQ(line.find('\0'), std::string::npos);
  EXPECT_THAT(line, HasSubstr("\\x00"));
  p = problems_of(kGroup + "exe = [\"/usr/bin/a\\nb\"]\n");
  ASSERT_EQ(p.size(), 1U);
  EXPECT_EQ(p[0].key, "group[0].select.exe[0]");
  // An unknown key with a NUL in its name is still one printable line.
  p = problems_of(kGroup + "\"a\\u0000b\" = 1\n");
  ASSERT_EQ(p.size(), 1U);
  EXPECT_THAT(p[0].to_string(), HasSubstr("a\\x00b: unknown key"));
}

// Defect 8: "3000000h" was reported as "2562047.79h is out of range".
TEST(ConfigHardening, HugeDurationSaysTooLarge) {
  auto p = problems_of(kGroup + "[group.policy]\ncold_age = \"3000000h\"\n");
  ASSERT_EQ(p.size(), 1U);
  EXPECT_THAT(p[0].message, HasSubstr("\"3000000h\" is too large"));
  EXPECT_THAT(p[0].message, Not(HasSubstr("2562047")));
}

// Defect 8: socket_mode "0" passed although the message says 0600 to 0777.
TEST(ConfigHardening, SocketModeMustLetTheOwnerIn) {
  for (const char* mode : {"0", "0500", "0177", "01777"}) {
    auto p = problems_of(std::string("[telemetry]\nsocket_mode = \"") + mode + "\"\n" + kGroup);
    ASSERT_EQ(p.size(), 1U) << mode;
    EXPECT_EQ(p[0].key, "telemetry.socket_mode");
  }
  EXPECT_TRUE(problems_of("[telemetry]\nsocket_mode = \"0600\"\n" + kGroup).empty());
}

// Defect 5: rounding the end up overflowed, so the range excluded nothing.
TEST(ConfigHardening, ExcludeToTheTopOfTheAddressSpace) {
  auto cc = compiled(kGroup + "[group.policy]\nexclude = [\"0x0-0xffffffffffffffff\"]\n");
  ASSERT_EQ(cc.config.groups.size(), 1U);
  const auto& ex = cc.config.groups[0].policy.exclude;
  ASSERT_EQ(ex.size(), 1U);
  EXPECT_EQ(ex[0].start, 0U);
  EXPECT_TRUE(ex[0].contains(0x7fff00000000ULL));
  EXPECT_TRUE(ex[0].contains(0xffffffffffffe000ULL));
  // Nested and overlapping ranges become one, so no lookup misses the outer one.
  cc = compiled(kGroup +
                "[group.policy]\nexclude = [\"0x10000-0x20000\", \"0x0-0x100000\", "
                "\"0x200000-0x201000\", \"0x200800-0x300000\"]\n");
  const auto& merged = cc.config.groups[0].policy.exclude;
  ASSERT_EQ(merged.size(), 2U);
  EXPECT_EQ(merged[0].start, 0U);
  EXPECT_EQ(merged[0].end, 0x100000U);
  EXPECT_EQ(merged[1].start, 0x200000U);
  EXPECT_EQ(merged[1].end, 0x300000U);
}

// Defect 7: a rejected 1 MB config was 77,780 log lines.
TEST(ConfigHardening, ManyProblemsAreSummarised) {
  std::string text = kGroup;
  for (int i = 0; i < 5000; ++i) text += "k" + std::to_string(i) + " = 1\n";
  auto p = problems_of(text);
  ASSERT_EQ(p.size(), 5000U);
  const auto lines = problem_lines(p);
  ASSERT_EQ(lines.size(), kMaxProblemLines);
  EXPECT_THAT(lines.back(), HasSubstr("t.toml: and 4981 more problem(s)"));
  EXPECT_EQ(problem_lines(ConfigProblems(p.begin(), p.begin() + 3)).size(), 3U);
  // One very long value is one line of bounded length, both ends kept.
  p = problems_of("[telemetry]\nsocket = \"" + std::string(100000, 'r') + "\"\n" + kGroup);
  ASSERT_EQ(p.size(), 1U);
  const std::string line = p[0].to_string();
  EXPECT_LT(line.size(), 1200U);
  EXPECT_THAT(line, HasSubstr("t.toml:2: telemetry.socket: \"rrr"));
  EXPECT_THAT(line, HasSubstr("(allowed: an absolute path)"));
}

}  // namespace
}  // namespace kvtier::policy
