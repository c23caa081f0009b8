#pragma once
// A scratch copy of a fixture tree under tests/fixtures/sources/ that a test
// may write to (DAMON sysfs writes) or break (remove files).

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "agent/host_paths.hpp"

namespace kvtier::testing {

class SourcesScratch {
 public:
  explicit SourcesScratch(const std::string& fixture = "")
      : root_(std::filesystem::temp_directory_path() /
              ("kvtier-sources-" + std::to_string(getpid()) + "-" +
               ::testing::UnitTest::GetInstance()->current_test_info()->name())) {
    std::filesystem::remove_all(root_);
    std::filesystem::create_directories(root_ / "sys");
    std::filesystem::create_directories(root_ / "proc");
    if (!fixture.empty()) {
      std::filesystem::copy(std::filesystem::path(KVTIER_FIXTURES) / "sources" / fixture, root_,
                            std::filesystem::copy_options::recursive |
                                std::filesystem::copy_options::overwrite_existing);
    }
  }
  ~SourcesScratch() { std::filesystem::remove_all(root_); }
  SourcesScratch(const SourcesScratch&) = delete;
  SourcesScratch& operator=(const SourcesScratch&) = delete;

  [[nodiscard]] agent::HostPaths paths() const { return agent::HostPaths::under(root_); }
  [[nodiscard]] std::filesystem::path sys(const std::string& rel) const {
    return root_ / "sys" / rel;
  }
  void write(const std::string& rel, const std::string& text) const {
    std::filesystem::create_directories((root_ / rel).parent_path());
    std::ofstream(root_ / rel, std::ios::trunc) << text;
  }
  [[nodiscard]] std::string read(const std::string& rel) const {
    std::ifstream in(root_ / rel);
    std::string s((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    while (!s.empty() && s.back() == '\n') s.pop_back();
    return s;
  }
  void remove(const std::string& rel) const { std::filesystem::remove_all(root_ / rel); }
  void mkdir(const std::string& rel) const { std::filesystem::create_directories(root_ / rel); }

 private:
  std::filesystem::path root_;
};

}  // namespace kvtier::testing
