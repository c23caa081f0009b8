#include "agent/host/sysfs.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <fstream>

#include "fixture.hpp"

namespace kvtier::agent {
namespace {

TEST(WriteText, ReplacesTheContentAndNeverCreates) {
  const testing::Fixture fx({testing::file("state", "off\n")});
  const auto& dir = fx.path();
  ASSERT_TRUE(write_text(dir / "state", "on"));
  EXPECT_EQ(read_text(dir / "state").value_or("?"), "on");
  auto missing = write_text(dir / "nr_kdamonds", "1");
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().code, ENOENT);
  EXPECT_NE(missing.error().message.find("nr_kdamonds: cannot open for writing"), std::string::npos)
      << missing.error().message;
  EXPECT_FALSE(std::filesystem::exists(dir / "nr_kdamonds"));
}

TEST(ParseIdList, RangesAndSingles) {
  auto ids = parse_id_list("0-2,5,7-8\n", "test");
  ASSERT_TRUE(ids) << ids.error().message;
  EXPECT_EQ(*ids, (std::vector<int>{0, 1, 2, 5, 7, 8}));
}

TEST(ParseIdList, EmptyIsEmpty) {
  auto ids = parse_id_list("\n", "test");
  ASSERT_TRUE(ids);
  EXPECT_TRUE(ids->empty());
}

TEST(ParseIdList, MalformedNamesSourceAndPart) {
  for (const char* bad : {"0-", "a", "3-1", "1,,2", "-1", "1-2-3"}) {
    auto ids = parse_id_list(bad, "/sys/x/cpulist");
    ASSERT_FALSE(ids) << bad;
    EXPECT_NE(ids.error().message.find("/sys/x/cpulist"), std::string::npos) << ids.error().message;
  }
}

TEST(ReadU64, MissingFileCarriesErrno) {
  auto v = read_u64("/nonexistent/kvtier/file");
  ASSERT_FALSE(v);
  EXPECT_EQ(v.error().code, ENOENT);
  EXPECT_NE(v.error().message.find("/nonexistent/kvtier/file"), std::string::npos);
}

TEST(ReadU64, RejectsGarbage) {
  testing::Fixture fx({testing::file("n", "12abc\n")});
  const auto path = fx.path("n");
  auto v = read_u64(path);
  ASSERT_FALSE(v);
  EXPECT_NE(v.error().message.find("12abc"), std::string::npos);
  fx.write("n", "250\n");
  auto ok = read_u64(path);
  ASSERT_TRUE(ok);
  EXPECT_EQ(*ok, 250U);
}

}  // namespace
}  // namespace kvtier::agent
