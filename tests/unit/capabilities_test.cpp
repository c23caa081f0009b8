#include "agent/daemon/capabilities.hpp"

#include <gtest/gtest.h>

namespace kvtier::agent {
namespace {

std::uint64_t bit(Cap c) {
  return 1ULL << static_cast<unsigned>(c);
}

TEST(Capabilities, MissingOnesAreNamedInOneLine) {
  const std::vector<Feature> features{Feature::kBpfSources, Feature::kMovePages};
  const auto need = capabilities_for(features);
  const std::uint64_t have = bit(Cap::kPerfmon) | bit(Cap::kSysNice);
  auto r = check_capabilities(need, have);
  ASSERT_FALSE(r);
  const auto& m = r.error().message;
  EXPECT_EQ(m.find('\n'), std::string::npos);
  EXPECT_NE(m.find("CAP_BPF ("), std::string::npos) << m;
  EXPECT_NE(m.find("CAP_SYS_PTRACE ("), std::string::npos) << m;
  EXPECT_EQ(m.find("CAP_PERFMON"), std::string::npos) << m;
  EXPECT_EQ(m.find("CAP_SYS_NICE"), std::string::npos) << m;
  EXPECT_EQ(r.error().code, EPERM);
}

TEST(Capabilities, AllPresentIsOk) {
  const std::vector<Feature> features{Feature::kBpfSources, Feature::kMovePages, Feature::kIdlePage,
                                      Feature::kBpfStats};
  EXPECT_TRUE(check_capabilities(capabilities_for(features), ~0ULL));
}

TEST(Capabilities, UnionListsEachCapabilityOnce) {
  const std::vector<Feature> features{Feature::kMovePages, Feature::kTargetProcfs,
                                      Feature::kIdlePage, Feature::kBpfStats, Feature::kDamon};
  const auto need = capabilities_for(features);
  for (std::size_t i = 0; i < need.size(); ++i) {
    for (std::size_t j = i + 1; j < need.size(); ++j) EXPECT_NE(need[i].cap, need[j].cap);
  }
  // ptrace, nice, sys_admin, dac_read_search; DAMON adds none.
  EXPECT_EQ(need.size(), 4U);
}

TEST(Capabilities, Names) {
  EXPECT_EQ(cap_name(Cap::kBpf), "CAP_BPF");
  EXPECT_EQ(cap_name(Cap::kPerfmon), "CAP_PERFMON");
  EXPECT_EQ(cap_name(Cap::kSysNice), "CAP_SYS_NICE");
}

}  // namespace
}  // namespace kvtier::agent
