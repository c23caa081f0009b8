#include <gtest/gtest.h>

#include "policy/units.hpp"

namespace kvtier::policy {
namespace {

TEST(Units, Durations) {
  EXPECT_EQ(parse_duration("250ms"), 250 * kNsPerMs);
  EXPECT_EQ(parse_duration("30s"), 30 * kNsPerSec);
  EXPECT_EQ(parse_duration("1.5m"), 90 * kNsPerSec);
  EXPECT_EQ(parse_duration("2h"), 7200 * kNsPerSec);
  EXPECT_FALSE(parse_duration("30"));
  EXPECT_NE(parse_duration("30").error().find("no unit"), std::string::npos);
  EXPECT_FALSE(parse_duration("30sec"));
  EXPECT_FALSE(parse_duration("-1s"));
  EXPECT_FALSE(parse_duration("s"));
  EXPECT_FALSE(parse_duration("1..2s"));
}

TEST(Units, Sizes) {
  EXPECT_EQ(parse_size("4096B"), 4096U);
  EXPECT_EQ(parse_size("64KiB"), 64U << 10);
  EXPECT_EQ(parse_size("512MiB"), 512ULL << 20);
  EXPECT_EQ(parse_size("1.5GiB"), 3ULL << 29);
  EXPECT_EQ(parse_size("2TiB"), 2ULL << 40);
  EXPECT_FALSE(parse_size("512MB"));
  EXPECT_FALSE(parse_size("0.5B"));
  EXPECT_FALSE(parse_size("99999999999TiB"));
}

TEST(Units, RatesAndPercent) {
  EXPECT_EQ(parse_rate("256MiB/s"), 256ULL << 20);
  EXPECT_FALSE(parse_rate("256MiB"));
  EXPECT_DOUBLE_EQ(*parse_percent("90%"), 0.9);
  EXPECT_DOUBLE_EQ(*parse_percent("2.5%"), 0.025);
  EXPECT_FALSE(parse_percent("101%"));
  EXPECT_FALSE(parse_percent("90"));
  EXPECT_FALSE(parse_percent("x%"));
}

TEST(Units, FormatRoundTrips) {
  EXPECT_EQ(format_size(512ULL << 20), "512MiB");
  EXPECT_EQ(format_size(3ULL << 29), "1.5GiB");
  EXPECT_EQ(format_size(0), "0B");
  EXPECT_EQ(format_duration(90 * kNsPerSec), "1.5m");
  EXPECT_EQ(format_duration(250 * kNsPerMs), "250ms");
  for (const char* s : {"4KiB", "3GiB", "17MiB"}) EXPECT_EQ(format_size(*parse_size(s)), s);
}

}  // namespace
}  // namespace kvtier::policy
