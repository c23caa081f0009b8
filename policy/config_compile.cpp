// The config's compiler: a parsed Config into what the daemon runs (the selectors' regular
// expressions compiled, the groups in match order, nodes checked against the topology).
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <re2/re2.h>
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <expected>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "policy/config.hpp"
#include "policy/config_reader.hpp"
#include "policy/config_schema.hpp"
#include "policy/topology.hpp"

namespace kvtier::policy {

std::expected<CompiledConfig, ConfigProblems> compile_config_text(std::string_view text,
                                                                  std::string_view file,
                                                                  const Topology* topo) {
  auto [cfg, problems] = config_schema::parse_partial(text, file);
  const bool syntax_error = problems.size() == 1 && problems[0].key.empty();
  if (syntax_error) return std::unexpected(std::move(problems));
  auto compiled = compile_config(std::move(cfg), topo);
  if (problems.empty() && compiled) return compiled;
  if (!compiled) {
    problems.insert(problems.end(), compiled.error().begin(), compiled.error().end());
  }
  std::ranges::stable_sort(problems, {}, &ConfigProblem::line);
  return std::unexpected(std::move(problems));
}

std::expected<CompiledConfig, ConfigProblems> load_compiled_config(const std::string& path,
                                                                   const Topology* topo) {
  auto text = config_reader::read_file(path);
  if (!text) return std::unexpected(ConfigProblems{text.error()});
  return compile_config_text(*text, path, topo);
}

namespace {

// Byte semantics (Latin-1), as /proc gives bytes: a command line need not be
// UTF-8. Errors come back as values; RE2 must not write to stderr itself.
RE2::Options regex_options() {
  RE2::Options o;
  o.set_encoding(RE2::Options::EncodingLatin1);
  o.set_log_errors(false);
  // Bounds the compiled program and its DFA cache; a pattern that needs more
  // fails to compile, and matching falls back to the (still linear) NFA.
  o.set_max_mem(std::int64_t{4} << 20);
  return o;
}

}  // namespace

std::expected<TargetMatcher, std::string> TargetMatcher::compile(const Selector& s) {
  TargetMatcher m;
  auto compile_all = [](const std::vector<std::string>& in,
                        std::vector<std::shared_ptr<const RE2>>& out,
                        std::string_view what) -> std::string {
    static const RE2::Options kOptions = regex_options();
    for (std::size_t i = 0; i < in.size(); ++i) {
      auto re = std::make_shared<const RE2>(in[i], kOptions);
      if (!re->ok()) {
        return fmt::format("{}[{}]\t\"{}\" is not a valid regular expression: {}", what, i, in[i],
                           re->error());
      }
      out.push_back(std::move(re));
    }
    return "";
  };
  if (auto why = compile_all(s.comm, m.comm_, "comm"); !why.empty()) return std::unexpected(why);
  if (auto why = compile_all(s.cmdline, m.cmdline_, "cmdline"); !why.empty()) {
    return std::unexpected(why);
  }
  m.exe_ = s.exe;
  m.cgroup_ = s.cgroup;
  m.pid_ = s.pid;
  return m;
}

bool TargetMatcher::matches(const ProcessInfo& p) const {
  if (std::ranges::find(pid_, p.pid) != pid_.end()) return true;
  if (std::ranges::find(exe_, p.exe) != exe_.end()) return true;
  for (const auto& c : cgroup_) {
    // The cgroup itself or anything below it, never a sibling sharing a prefix.
    if (p.cgroup == c || (p.cgroup.starts_with(c) && (c == "/" || p.cgroup[c.size()] == '/'))) {
      return true;
    }
  }
  // Bounded here too: a ProcessInfo need not come from read_process.
  const std::string_view comm = std::string_view(p.comm).substr(0, kMaxCmdlineBytes);
  const std::string_view cmdline = std::string_view(p.cmdline).substr(0, kMaxCmdlineBytes);
  for (const auto& r : comm_) {
    if (RE2::PartialMatch(comm, *r)) return true;
  }
  for (const auto& r : cmdline_) {
    if (RE2::PartialMatch(cmdline, *r)) return true;
  }
  return false;
}

std::optional<std::size_t> CompiledConfig::group_of(const ProcessInfo& p) const {
  for (const auto& g : match_order) {
    if (g.matcher.matches(p)) return g.index;
  }
  return std::nullopt;
}

std::expected<CompiledConfig, ConfigProblems> compile_config(Config config, const Topology* topo) {
  ConfigProblems problems;
  auto add = [&](const std::string& key, std::string message) {
    problems.push_back(ConfigProblem{.file = config.file,
                                     .line = config.line_of(key),
                                     .key = key,
                                     .message = std::move(message)});
  };
  CompiledConfig out;
  for (std::size_t i = 0; i < config.groups.size(); ++i) {
    const GroupConfig& g = config.groups[i];
    const std::string base = fmt::format("group[{}]", i);
    auto m = TargetMatcher::compile(g.select);
    if (!m) {
      const auto tab = m.error().find('\t');
      add(fmt::format("{}.select.{}", base, m.error().substr(0, tab)),
          m.error().substr(tab + 1) + " (allowed: RE2 regular expressions)");
    } else {
      out.match_order.push_back(CompiledGroup{.index = i, .matcher = std::move(*m)});
    }
    if (topo != nullptr && g.demotion_node) {
      const NumaNode* n = topo->find(*g.demotion_node);
      std::vector<int> ids;
      for (const auto& node : topo->nodes) {
        if (node.has_memory()) ids.push_back(node.id);
      }
      const std::string allowed =
          fmt::format("\"auto\" or a node with memory: {}", fmt::join(ids, ", "));
      if (n == nullptr) {
        add(base + ".demotion_node",
            fmt::format("node {} does not exist on this host (allowed: {})", *g.demotion_node,
                        allowed));
      } else if (!n->has_memory()) {
        add(base + ".demotion_node",
            fmt::format("node {} has no memory (allowed: {})", *g.demotion_node, allowed));
      }
    }
  }
  if (!problems.empty()) return std::unexpected(std::move(problems));
  std::ranges::stable_sort(out.match_order, [&](const CompiledGroup& a, const CompiledGroup& b) {
    return config.groups[a.index].priority > config.groups[b.index].priority;
  });
  out.config = std::move(config);
  return out;
}

}  // namespace kvtier::policy
