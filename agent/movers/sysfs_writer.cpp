#include "agent/movers/sysfs_writer.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>

#include <fmt/format.h>

namespace kvtier::agent {

Result<void> write_sysfs(const std::filesystem::path& path, std::string_view value) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_TRUNC | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    return fail(fmt::format("{}: cannot open for writing: {}", path.string(), errno_text(err)),
                err);
  }
  const ssize_t n = ::write(fd, value.data(), value.size());
  const int err = errno;
  ::close(fd);
  if (n != static_cast<ssize_t>(value.size())) {
    return fail(fmt::format("{}: writing '{}' failed: {}", path.string(), value,
                            n < 0 ? errno_text(err) : std::string("short write")),
                n < 0 ? err : EIO);
  }
  return {};
}

}  // namespace kvtier::agent
