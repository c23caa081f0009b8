// kvtierctl launch: starts a command with a NUMA memory policy already set, so
// that what it allocates (a KV pool pinned later, which nothing can move once
// pinned) lands on the node the operator chose. The policy is the process's
// own (set_mempolicy(2)), inherited across execvp and fork.

#include <fmt/format.h>
#include <linux/mempolicy.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "agent/ctl/command.hpp"
#include "policy/error.hpp"

namespace kvtier::agent::ctl {
namespace {

struct LaunchArgs {
  int node = -1;
  bool preferred = false;
  std::vector<std::string> command;
};

// "EINVAL (Invalid argument)".
std::string errno_words(int err) {
  const char* name = strerrorname_np(err);
  return fmt::format("{} ({})", name != nullptr ? name : std::to_string(err), errno_text(err));
}

int launch(const LaunchArgs& a) {
  constexpr int kBitsPerWord = 8 * sizeof(unsigned long);  // NOLINT(google-runtime-int)
  std::vector<unsigned long> mask(static_cast<std::size_t>(a.node / kBitsPerWord) + 1,
                                  0);  // NOLINT(google-runtime-int)
  mask[static_cast<std::size_t>(a.node / kBitsPerWord)] = 1UL << (a.node % kBitsPerWord);
  const int mode = a.preferred ? MPOL_PREFERRED : MPOL_BIND;
  const char* mode_name = a.preferred ? "MPOL_PREFERRED" : "MPOL_BIND";
  if (syscall(SYS_set_mempolicy, mode, mask.data(), mask.size() * kBitsPerWord + 1) != 0) {
    const int err = errno;
    fmt::print(stderr,
               "kvtierctl launch: set_mempolicy({}, node {}): {}; is node {} online with memory? "
               "see kvtierctl nodes\n",
               mode_name, a.node, errno_words(err), a.node);
    return kExitFailed;
  }
  std::vector<char*> argv;
  argv.reserve(a.command.size() + 1);
  for (const auto& s : a.command) argv.push_back(const_cast<char*>(s.c_str()));
  argv.push_back(nullptr);
  execvp(argv[0], argv.data());
  const int err = errno;
  fmt::print(stderr, "kvtierctl launch: cannot run '{}': {}\n", a.command[0], errno_words(err));
  return kExitFailed;
}

}  // namespace

void add_launch_command(CLI::App& app, Globals& g) {
  auto a = std::make_shared<LaunchArgs>();
  auto* cmd = app.add_subcommand(
      "launch",
      "Run a command with its memory bound to (or preferring) a NUMA node, so a pool it pins "
      "later is placed there first (docs/gpu-servers.md)");
  cmd->add_option("--node", a->node, "The node its memory comes from (see kvtierctl nodes)")
      ->required()
      ->check(CLI::Range(0, 1023));
  cmd->add_flag("--preferred", a->preferred,
                "Prefer the node (MPOL_PREFERRED: other nodes when it is full) instead of "
                "binding to it (MPOL_BIND)");
  cmd->add_option("command", a->command, "-- COMMAND [ARGS...]")->required()->expected(-1);
  cmd->callback([&g, a] { g.exit_code = launch(*a); });
}

}  // namespace kvtier::agent::ctl
