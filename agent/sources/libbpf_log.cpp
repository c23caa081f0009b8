#include "agent/sources/libbpf_log.hpp"

#include <bpf/libbpf.h>
#include <spdlog/spdlog.h>

#include <array>
#include <cstdarg>
#include <cstdio>
#include <mutex>
#include <string_view>

namespace kvtier::agent {

namespace {

int to_spdlog(enum libbpf_print_level level, const char* format, va_list args) {
  std::array<char, 1024> buf{};
  // NOLINTNEXTLINE(clang-analyzer-valist.Uninitialized): libbpf hands us a started va_list
  const int n = std::vsnprintf(buf.data(), buf.size(), format, args);
  if (n <= 0) return n;
  std::string_view text(buf.data());
  while (!text.empty() && text.back() == '\n') text.remove_suffix(1);
  switch (level) {
    case LIBBPF_WARN:
      spdlog::warn("libbpf: {}", text);
      break;
    case LIBBPF_INFO:
      spdlog::debug("libbpf: {}", text);
      break;
    case LIBBPF_DEBUG:
      spdlog::trace("libbpf: {}", text);
      break;
  }
  return n;
}

}  // namespace

void install_libbpf_logger() {
  static std::once_flag once;
  std::call_once(once, [] { libbpf_set_print(to_spdlog); });
}

}  // namespace kvtier::agent
