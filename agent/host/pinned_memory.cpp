#include "agent/host/pinned_memory.hpp"

#include <fmt/format.h>

#include <cerrno>
#include <charconv>
#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include "agent/host/host_paths.hpp"
#include "agent/host/sysfs.hpp"
#include "policy/error.hpp"
#include "policy/types.hpp"

namespace kvtier::agent {
namespace fs = std::filesystem;

namespace {

constexpr std::uint64_t kPage = 4096;

template <typename T>
bool parse_number(std::string_view s, T& out, int base = 10) {
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), out, base);
  return ec == std::errc{} && ptr == s.data() + s.size();
}

std::string_view trim(std::string_view s) {
  const auto b = s.find_first_not_of(" \t");
  if (b == std::string_view::npos) return {};
  const auto e = s.find_last_not_of(" \t\r");
  return s.substr(b, e - b + 1);
}

// "    0: 0x7ffac1800000/1048576" -> the range; nullopt when malformed.
std::optional<AddrRange> parse_buffer_line(std::string_view line) {
  const auto colon = line.find(':');
  const auto slash = line.find('/');
  if (colon == std::string_view::npos || slash == std::string_view::npos || slash < colon) {
    return std::nullopt;
  }
  std::uint32_t index = 0;
  std::uint64_t addr = 0;
  std::uint64_t len = 0;
  const std::string_view a = trim(line.substr(colon + 1, slash - colon - 1));
  if (!parse_number(trim(line.substr(0, colon)), index) || !a.starts_with("0x") ||
      !parse_number(a.substr(2), addr, 16) || !parse_number(trim(line.substr(slash + 1)), len)) {
    return std::nullopt;
  }
  return AddrRange{addr / kPage * kPage, (addr + len + kPage - 1) / kPage * kPage};
}

}  // namespace

std::optional<std::uint64_t> parse_status_vm_pin(std::string_view status) {
  std::istringstream in{std::string(status)};
  std::string line;
  while (std::getline(in, line)) {
    if (!line.starts_with("VmPin:")) continue;
    std::string_view v = trim(std::string_view(line).substr(6));
    if (!v.ends_with("kB")) return std::nullopt;
    std::uint64_t kb = 0;
    if (!parse_number(trim(v.substr(0, v.size() - 2)), kb)) return std::nullopt;
    return kb * 1024;
  }
  return std::nullopt;
}

Result<std::vector<AddrRange>> parse_io_uring_buffers(std::string_view fdinfo,
                                                      std::string_view what) {
  std::vector<AddrRange> out;
  std::istringstream in{std::string(fdinfo)};
  std::string line;
  bool in_bufs = false;
  while (std::getline(in, line)) {
    if (line.starts_with("UserBufs:")) {
      in_bufs = true;
      continue;
    }
    // The buffer lines are indented; the next key is not.
    if (!in_bufs || line.empty() || (line[0] != ' ' && line[0] != '\t')) {
      in_bufs = false;
      continue;
    }
    const auto r = parse_buffer_line(line);
    if (!r) return fail(fmt::format("{}: malformed UserBufs line '{}'", what, line));
    if (r->end > r->start) out.push_back(*r);
  }
  return out;
}

Result<PinnedMemory> read_pinned_memory(const HostPaths& paths, Pid pid) {
  const fs::path dir = paths.proc / std::to_string(pid);
  PinnedMemory pm;
  auto status = read_text(dir / "status");
  if (!status) {
    const int code = status.error().code;
    if (code == ENOENT || code == ESRCH) return fail(fmt::format("process {} exited", pid), ESRCH);
    return std::unexpected(status.error());
  }
  pm.vm_pin_bytes = parse_status_vm_pin(*status);
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir / "fd", ec)) {
    std::error_code lec;
    const fs::path target = fs::read_symlink(entry.path(), lec);
    if (lec || target.string() != "anon_inode:[io_uring]") continue;
    const fs::path info = dir / "fdinfo" / entry.path().filename();
    auto text = read_text(info);
    if (!text) continue;  // closed since
    ++pm.io_urings;
    auto bufs = parse_io_uring_buffers(*text, info.string());
    if (!bufs) return std::unexpected(bufs.error());
    pm.registered.insert(pm.registered.end(), bufs->begin(), bufs->end());
  }
  if (ec && ec != std::errc::no_such_file_or_directory) {
    return fail(fmt::format("{}: {}", (dir / "fd").string(), ec.message()), ec.value());
  }
  return pm;
}

std::map<int, std::uint64_t> parse_movable_zones(std::string_view zoneinfo) {
  std::map<int, std::uint64_t> out;
  std::istringstream in{std::string(zoneinfo)};
  std::string line;
  int node = -1;
  bool movable = false;
  while (std::getline(in, line)) {
    std::istringstream words(line);
    std::string first;
    words >> first;
    if (first == "Node") {
      std::string id;
      std::string zone_word;
      std::string zone;
      words >> id >> zone_word >> zone;
      if (!id.empty() && id.back() == ',') id.pop_back();
      movable = zone == "Movable" && parse_number(id, node);
      continue;
    }
    std::uint64_t pages = 0;
    std::string value;
    if (movable && first == "managed" && (words >> value) && parse_number(value, pages) &&
        pages > 0) {
      out[node] += pages * kPage;
    }
  }
  return out;
}

std::map<int, std::uint64_t> read_movable_zones(const HostPaths& paths) {
  auto text = read_text(paths.proc / "zoneinfo");
  return text ? parse_movable_zones(*text) : std::map<int, std::uint64_t>{};
}

}  // namespace kvtier::agent
