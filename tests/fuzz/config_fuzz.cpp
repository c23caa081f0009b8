// libFuzzer target: the config parser and compiler, exactly as kvtierd and
// `kvtierctl config check` run them, then the compiled selectors on a process
// made of the same bytes. Seeds: systemd/kvtier.toml, tests/fixtures/config.

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "policy/config.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto cc = kvtier::policy::compile_config_text(text, "fuzz.toml");
  if (!cc) {
    for (const auto& line : kvtier::policy::problem_lines(cc.error())) {
      if (line.find('\0') != std::string::npos) __builtin_trap();  // one printable line each
    }
    return 0;
  }
  const std::string s(text);
  (void)cc->group_of({.pid = 1, .comm = s.substr(0, 15), .cmdline = s, .exe = s, .cgroup = s});
  return 0;
}
