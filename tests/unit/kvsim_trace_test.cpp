#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <sstream>

#include "bench/kvsim/trace.hpp"

namespace kvtier::bench {
namespace {

using ::testing::HasSubstr;

const std::filesystem::path kFixtures = std::filesystem::path(KVTIER_FIXTURES) / "kvsim";

TEST(KvsimTrace, ParsesMooncakeLines) {
  std::istringstream in(
      R"({"timestamp": 40, "input_length": 1000, "output_length": 6, "hash_ids": [0, 1]})"
      "\n\n"
      R"({"timestamp": 1540, "input_length": 512, "output_length": 3, "hash_ids": [0]})"
      "\n");
  auto t = parse_mooncake(in, "mem.jsonl");
  ASSERT_TRUE(t) << t.error().message;
  ASSERT_EQ(t->requests.size(), 2U);
  EXPECT_DOUBLE_EQ(t->requests[0].arrival_s, 0.0);  // relative to the first request
  EXPECT_DOUBLE_EQ(t->requests[1].arrival_s, 1.5);
  EXPECT_EQ(t->requests[0].input_tokens, 1000U);
  EXPECT_EQ(t->requests[0].output_tokens, 6U);
  EXPECT_EQ(t->requests[0].hash_ids, (std::vector<std::uint64_t>{0, 1}));
  EXPECT_EQ(t->requests[1].line, 3U);
  EXPECT_DOUBLE_EQ(t->span_s(), 1.5);
}

TEST(KvsimTrace, MooncakeErrorsNameFileAndLine) {
  const auto err = [](const std::string& text) {
    std::istringstream in(text);
    auto t = parse_mooncake(in, "x.jsonl");
    EXPECT_FALSE(t);
    return t ? std::string() : t.error().message;
  };
  const std::string good =
      R"({"timestamp": 0, "input_length": 10, "output_length": 1, "hash_ids": [5]})"
      "\n";
  EXPECT_THAT(err(good + "{not json\n"), HasSubstr("x.jsonl:2: not a JSON object"));
  EXPECT_THAT(err(good + R"({"timestamp": 1, "output_length": 1, "hash_ids": [5]})"),
              HasSubstr("x.jsonl:2: missing \"input_length\""));
  EXPECT_THAT(
      err(good + R"({"timestamp": 1, "input_length": -3, "output_length": 1, "hash_ids": []})"),
      HasSubstr("x.jsonl:2: \"input_length\" must be a non-negative integer"));
  EXPECT_THAT(err(good + good +
                  R"({"timestamp": 1, "input_length": 600, "output_length": 1, "hash_ids": [1]})"),
              HasSubstr("x.jsonl:3: 1 hash ids for input_length 600; expected 2"));
  EXPECT_THAT(
      err(R"({"timestamp": "soon", "input_length": 1, "output_length": 1, "hash_ids": [1]})"),
      HasSubstr("x.jsonl:1: \"timestamp\""));
  EXPECT_THAT(err(R"({"timestamp": 0, "input_length": 1, "output_length": 1, "hash_ids": ["a"]})"),
              HasSubstr("x.jsonl:1: hash id \"a\""));
  EXPECT_THAT(err("\n\n"), HasSubstr("x.jsonl: no requests"));
}

TEST(KvsimTrace, ParsesAzureCsv) {
  std::istringstream in(
      "TIMESTAMP,ContextTokens,GeneratedTokens\n"
      "2023-11-16 18:15:46.6805900,374,44\n"
      "2023-11-16 18:15:50.9951690,396,109\r\n"
      "2023-11-17 00:00:00.5,1,2\n");
  auto t = parse_azure(in, "a.csv");
  ASSERT_TRUE(t) << t.error().message;
  ASSERT_EQ(t->requests.size(), 3U);
  EXPECT_NEAR(t->requests[1].arrival_s, 4.314579, 1e-6);
  // Across midnight: 5 h 44 min 13.8194100 s after the first.
  EXPECT_NEAR(t->requests[2].arrival_s, 5 * 3600 + 44 * 60 + 13.81941, 1e-6);
  EXPECT_EQ(t->requests[1].input_tokens, 396U);
  EXPECT_EQ(t->requests[1].output_tokens, 109U);
  EXPECT_TRUE(t->requests[0].hash_ids.empty());
}

TEST(KvsimTrace, AzureErrorsNameFileAndLine) {
  const auto err = [](const std::string& text) {
    std::istringstream in("TIMESTAMP,ContextTokens,GeneratedTokens\n" + text);
    auto t = parse_azure(in, "a.csv");
    EXPECT_FALSE(t);
    return t ? std::string() : t.error().message;
  };
  EXPECT_THAT(err("2023-11-16 18:15:46.1,374\n"), HasSubstr("a.csv:2: expected 3 comma-separated"));
  EXPECT_THAT(err("2023-11-16 18:15:46.1,1,2\n2023-11-16 18:15:46.2,x,44\n"),
              HasSubstr("a.csv:3: ContextTokens 'x'"));
  EXPECT_THAT(err("2023-11-16 18:15:46.1,1,-2\n"), HasSubstr("a.csv:2: GeneratedTokens '-2'"));
  EXPECT_THAT(err("2023-13-16 18:15:46.1,1,2\n"), HasSubstr("a.csv:2: bad timestamp"));
  EXPECT_THAT(err("yesterday,1,2\n"), HasSubstr("a.csv:2: bad timestamp"));
}

TEST(KvsimTrace, FormatFromExtension) {
  EXPECT_EQ(trace_format_from_path("a/b.jsonl").value(), TraceFormat::kMooncake);
  EXPECT_EQ(trace_format_from_path("b.csv").value(), TraceFormat::kAzure);
  auto bad = trace_format_from_path("b.txt");
  ASSERT_FALSE(bad);
  EXPECT_THAT(bad.error().message, HasSubstr("--trace-format"));
  EXPECT_FALSE(parse_trace_format("sharegpt"));
}

TEST(KvsimTrace, ReadsFixtureFilesAndNamesMissingOnes) {
  auto m = read_trace(kFixtures / "mini_mooncake.jsonl", TraceFormat::kMooncake);
  ASSERT_TRUE(m) << m.error().message;
  EXPECT_EQ(m->requests.size(), 40U);
  EXPECT_DOUBLE_EQ(m->span_s(), 1.95);
  auto a = read_trace(kFixtures / "mini_azure.csv", TraceFormat::kAzure);
  ASSERT_TRUE(a) << a.error().message;
  EXPECT_EQ(a->requests.size(), 30U);
  EXPECT_NEAR(a->span_s(), 1.45, 1e-6);  // sub-microsecond: seconds since 1970 in a double
  auto missing = read_trace(kFixtures / "nope.jsonl", TraceFormat::kMooncake);
  ASSERT_FALSE(missing);
  EXPECT_THAT(missing.error().message, HasSubstr("nope.jsonl: cannot open trace"));
}

}  // namespace
}  // namespace kvtier::bench
