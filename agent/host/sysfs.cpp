#include "agent/host/sysfs.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include "policy/error.hpp"

namespace kvtier::agent {

Result<std::string> read_text(const std::filesystem::path& path) {
  std::ifstream in(path);
  if (!in) {
    const int err = errno;
    return fail(fmt::format("{}: cannot read: {}", path.string(), errno_text(err)), err);
  }
  std::ostringstream buf;
  buf << in.rdbuf();
  if (in.bad()) {
    const int err = errno;
    return fail(fmt::format("{}: read failed: {}", path.string(), errno_text(err)), err);
  }
  std::string text = std::move(buf).str();
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  return text;
}

Result<std::string> read_text_prefix(const std::filesystem::path& path, std::size_t max_bytes) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    const int err = errno;
    return fail(fmt::format("{}: cannot read: {}", path.string(), errno_text(err)), err);
  }
  std::string text(max_bytes, '\0');
  in.read(text.data(), static_cast<std::streamsize>(max_bytes));
  if (in.bad()) {
    const int err = errno;
    return fail(fmt::format("{}: read failed: {}", path.string(), errno_text(err)), err);
  }
  text.resize(static_cast<std::size_t>(in.gcount()));
  return text;
}

Result<void> write_text(const std::filesystem::path& path, std::string_view value) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_TRUNC | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    return fail(fmt::format("{}: cannot open for writing: {}", path.string(), errno_text(err)),
                err);
  }
  const ssize_t n = ::write(fd, value.data(), value.size());
  const int err = n < 0 ? errno : 0;
  ::close(fd);
  if (n < 0) {
    return fail(fmt::format("{}: writing '{}' failed: {}", path.string(), value, errno_text(err)),
                err);
  }
  if (static_cast<std::size_t>(n) != value.size()) {
    return fail(fmt::format("{}: short write of '{}'", path.string(), value), EIO);
  }
  return {};
}

std::filesystem::path temp_dir() {
  std::error_code ec;
  std::filesystem::path dir = std::filesystem::temp_directory_path(ec);
  return ec ? std::filesystem::path("/tmp") : dir;
}

Result<void> replace_file(const std::filesystem::path& path, std::string_view text) {
  std::filesystem::path tmp = path;
  tmp += ".new";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << text;
    out.flush();
    if (!out) {
      const int err = errno;
      return fail(fmt::format("{}: cannot write: {}", tmp.string(), errno_text(err)), err);
    }
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) return fail(fmt::format("{}: cannot write: {}", path.string(), ec.message()), ec.value());
  return {};
}

Result<std::uint64_t> read_u64(const std::filesystem::path& path) {
  auto text = read_text(path);
  if (!text) return std::unexpected(text.error());
  return parse_u64(*text, path.string());
}

Result<std::uint64_t> parse_u64(std::string_view text, std::string_view what) {
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.remove_suffix(1);
  std::uint64_t value = 0;
  const char* first = text.data();
  const char* last = first + text.size();
  auto [ptr, ec] = std::from_chars(first, last, value);
  if (ec != std::errc{} || ptr != last || text.empty()) {
    return fail(
        fmt::format("{}: expected an unsigned number, found '{}'", what, text.substr(0, 64)));
  }
  return value;
}

Result<std::vector<int>> parse_id_list(std::string_view text, std::string_view what) {
  std::vector<int> ids;
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.remove_suffix(1);
  if (text.empty()) return ids;
  const auto bad = [&](std::string_view part) {
    return fail(fmt::format("{}: malformed id list '{}' (bad part '{}'); expected e.g. 0-3,8", what,
                            text, part));
  };
  std::size_t pos = 0;
  while (pos <= text.size()) {
    const std::size_t comma = text.find(',', pos);
    const std::string_view part =
        text.substr(pos, comma == std::string_view::npos ? std::string_view::npos : comma - pos);
    const std::size_t dash = part.find('-');
    int lo = 0;
    int hi = 0;
    const std::string_view lo_s = part.substr(0, dash);
    auto r1 = std::from_chars(lo_s.data(), lo_s.data() + lo_s.size(), lo);
    if (lo_s.empty() || r1.ec != std::errc{} || r1.ptr != lo_s.data() + lo_s.size() || lo < 0 ||
        lo > kMaxListId) {
      return bad(part);
    }
    hi = lo;
    if (dash != std::string_view::npos) {
      const std::string_view hi_s = part.substr(dash + 1);
      auto r2 = std::from_chars(hi_s.data(), hi_s.data() + hi_s.size(), hi);
      if (hi_s.empty() || r2.ec != std::errc{} || r2.ptr != hi_s.data() + hi_s.size() || hi < lo ||
          hi > kMaxListId) {
        return bad(part);
      }
    }
    for (int id = lo; id <= hi; ++id) ids.push_back(id);
    if (comma == std::string_view::npos) break;
    pos = comma + 1;
  }
  return ids;
}

}  // namespace kvtier::agent
