#pragma once
// Writes to sysfs control files under an injectable root. Files are opened
// without O_CREAT, so a missing knob is an error in a fixture tree just as on
// a kernel that lacks it.

#include <filesystem>
#include <string_view>

#include "policy/error.hpp"

namespace kvtier::agent {

Result<void> write_sysfs(const std::filesystem::path& path, std::string_view value);

}  // namespace kvtier::agent
