#pragma once
// Small readers for procfs/sysfs files. Every error names the file.

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "policy/error.hpp"

namespace kvtier::agent {

// The whole file, trailing newline removed. ENOENT and friends come back as
// errors whose message names the path and the errno text.
Result<std::string> read_text(const std::filesystem::path& path);
// At most the first `max_bytes` of the file (/proc/PID/cmdline: any local user
// decides how long it is), trailing newline kept.
Result<std::string> read_text_prefix(const std::filesystem::path& path, std::size_t max_bytes);

// Writes `value` to a control file (sysfs knobs, DAMON's admin tree). The file
// is opened without O_CREAT, so a missing knob is an error in a fixture tree
// just as on a kernel that lacks it; errors name the file, the value and the errno.
Result<void> write_text(const std::filesystem::path& path, std::string_view value);

// Where temporary files go: $TMPDIR when it names a directory, else /tmp (what
// mkstemp(3) and mkdtemp(3) users expect), never an exception.
std::filesystem::path temp_dir();

// Replaces the regular file `path` with `text` as a whole: written to PATH.new, then renamed
// over it, so a reader (or a kvtierd killed meanwhile) sees the old file or the new one.
Result<void> replace_file(const std::filesystem::path& path, std::string_view text);

// A file holding one unsigned decimal number (HMAT access figures, ...).
Result<std::uint64_t> read_u64(const std::filesystem::path& path);
// The same for text already read; `what` names it in the error.
Result<std::uint64_t> parse_u64(std::string_view text, std::string_view what);

// The first line of `text`, without its '\n'; `text` loses it and the '\n'.
inline std::string_view take_line(std::string_view& text) {
  const std::size_t nl = text.find('\n');
  const std::string_view line = text.substr(0, nl);
  text.remove_prefix(nl == std::string_view::npos ? text.size() : nl + 1);
  return line;
}

// A kernel list such as "0-3,8,10-11" (cpulist, nodelist, online). Empty text
// is an empty list. `what` names the source in error messages. Ids above
// kMaxListId are refused: a list is expanded, and "0-2000000000" must cost an
// error, not 8 GB.
inline constexpr int kMaxListId = 1 << 16;
Result<std::vector<int>> parse_id_list(std::string_view text, std::string_view what);

}  // namespace kvtier::agent
