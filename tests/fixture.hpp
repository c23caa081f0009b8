#pragma once
// The one temporary-tree builder of the tests (after oomd's Fixture): a fresh
// directory that a test fills with checked-in trees from tests/fixtures/
// (copy), with files written inline (write, or a tree literal of file() and
// dir() entries), and may break (remove); it is removed, with everything in
// it, when the Fixture goes. HostPaths point kvtier's readers at it.
//
//   Fixture host;
//   host.copy("topology/hmat-guest")
//       .add({dir("proc", {dir("4242", {file("comm", "vllm\n")})})});
//   read_topology(host.paths());

#include <stdlib.h>  // mkdtemp

#include <filesystem>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "agent/host/host_paths.hpp"

namespace kvtier::testing {

// One file or directory of a tree literal.
struct FixtureEntry {
  std::string name;
  bool is_dir = false;
  std::string content;                // files
  std::vector<FixtureEntry> entries;  // directories
};

inline FixtureEntry file(std::string name, std::string content = "") {
  return FixtureEntry{.name = std::move(name), .content = std::move(content)};
}
inline FixtureEntry dir(std::string name, std::vector<FixtureEntry> entries = {}) {
  return FixtureEntry{.name = std::move(name), .is_dir = true, .entries = std::move(entries)};
}

class Fixture {
 public:
  // The directory is traversable by everyone: the daemon tests' unprivileged
  // children reach sockets in it, and the socket's own mode decides.
  Fixture() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "kvtier-test-XXXXXX").string();
    if (mkdtemp(tmpl.data()) == nullptr) throw std::runtime_error("mkdtemp failed for " + tmpl);
    root_ = tmpl;
    std::filesystem::permissions(root_, std::filesystem::perms(0755));
  }
  explicit Fixture(const std::vector<FixtureEntry>& entries) : Fixture() { add(entries); }
  ~Fixture() {
    if (root_.empty()) return;
    std::error_code ec;
    std::filesystem::remove_all(root_, ec);
  }
  Fixture(const Fixture&) = delete;
  Fixture& operator=(const Fixture&) = delete;
  Fixture(Fixture&& o) noexcept : root_(std::exchange(o.root_, {})) {}
  Fixture& operator=(Fixture&&) = delete;

  [[nodiscard]] const std::filesystem::path& path() const { return root_; }
  [[nodiscard]] std::filesystem::path path(const std::string& rel) const { return root_ / rel; }
  // The tree as ROOT/proc and ROOT/sys, for kvtier's readers.
  [[nodiscard]] agent::HostPaths paths() const { return agent::HostPaths::under(root_); }

  // Copies the checked-in tree tests/fixtures/FROM into the directory (at TO).
  Fixture& copy(const std::string& from, const std::string& to = "") {
    std::filesystem::create_directories(root_ / to);
    std::filesystem::copy(std::filesystem::path(KVTIER_FIXTURES) / from, root_ / to,
                          std::filesystem::copy_options::recursive |
                              std::filesystem::copy_options::overwrite_existing);
    return *this;
  }
  // Creates a tree literal under UNDER.
  Fixture& add(const std::vector<FixtureEntry>& entries, const std::string& under = "") {
    for (const auto& e : entries) {
      const std::string rel = under.empty() ? e.name : under + "/" + e.name;
      if (e.is_dir) {
        mkdir(rel);
        add(e.entries, rel);
      } else {
        write(rel, e.content);
      }
    }
    return *this;
  }
  // Replaces (or creates, with its parents) the file REL.
  Fixture& write(const std::string& rel, const std::string& text) {
    std::filesystem::create_directories((root_ / rel).parent_path());
    std::ofstream(root_ / rel, std::ios::binary | std::ios::trunc) << text;
    return *this;
  }
  Fixture& mkdir(const std::string& rel) {
    std::filesystem::create_directories(root_ / rel);
    return *this;
  }
  Fixture& remove(const std::string& rel) {
    std::filesystem::remove_all(root_ / rel);
    return *this;
  }
  // The file REL without its trailing newlines ("" if missing).
  [[nodiscard]] std::string read(const std::string& rel) const {
    std::ifstream in(root_ / rel);
    std::string s((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    while (!s.empty() && s.back() == '\n') s.pop_back();
    return s;
  }

 private:
  std::filesystem::path root_;
};

}  // namespace kvtier::testing
