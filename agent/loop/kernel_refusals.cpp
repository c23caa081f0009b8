#include "agent/loop/kernel_refusals.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "agent/sources/source_registry.hpp"
#include "agent/telemetry/telemetry.hpp"
#include "policy/config.hpp"
#include "policy/types.hpp"

namespace kvtier::agent {

std::vector<SourceRefusal> kernel_refusals(std::span<const SourceReport> reports) {
  std::vector<SourceRefusal> out;
  for (const auto& r : reports) {
    if (!r.availability.ok && r.availability.kernel_refuses) {
      out.push_back({.kind = r.kind, .why = r.availability.why});
    }
  }
  return out;
}

void refused_source_lines(std::span<const SourceRefusal> refused, const std::string& running,
                          std::vector<std::string>& out) {
  for (const auto& r : refused) {
    out.push_back(fmt::format("source {} refused by the kernel: {}; kvtierd runs with {}",
                              policy::source_name(r.kind), r.why,
                              running.empty() ? std::string("no source") : running));
  }
}

void export_refused_sources(std::span<const SourceRefusal> refused, Telemetry& telemetry) {
  telemetry.clear("kvtier_source_refused");  // a reload may have changed them
  for (const auto& r : refused) {
    telemetry.set("kvtier_source_refused", {{"source", std::string(policy::source_name(r.kind))}},
                  1.0);
  }
}

bool MoveRefusals::Episode::begin(std::uint64_t n, int to_node, TimeNs now) {
  const bool fresh = !open(now);
  if (fresh) {
    first = now;
    pages = 0;
  }
  pages += n;
  last = now;
  node = to_node;
  return fresh;
}

void MoveRefusals::note(const MoveStats& st, Pid pid, int to_node, bool demotion, TimeNs now) {
  if (st.busy > 0 && busy_.begin(st.busy, to_node, now)) {
    spdlog::warn(
        "moving pages of {} to node {}: {} pages busy (-EBUSY/-EAGAIN: under writeback, locked "
        "or in use); they stay where they are and are planned again once min_residence has "
        "passed; see docs/troubleshoot.md",
        pid, to_node, st.busy);
  }
  if (!demotion && st.no_memory > 0 && promotion_full_.begin(st.no_memory, to_node, now)) {
    spdlog::warn(
        "promoting pages of {} to node {}: no free memory there (ENOMEM for {} pages); the hot "
        "pages wait on the slow node, planned again once min_residence has passed, while "
        "kvtierd demotes cold ones to make room; free memory on node {} or see "
        "docs/troubleshoot.md",
        pid, to_node, st.no_memory, to_node);
  }
}

void MoveRefusals::lines(TimeNs now, std::vector<std::string>& out) const {
  const auto ago = [now](TimeNs t) { return static_cast<double>(now - t) / 1e9; };
  if (busy_.open(now)) {
    out.push_back(fmt::format(
        "{} pages busy in moves since {:.0f} s ago, the last {:.0f} s ago (-EBUSY/-EAGAIN: "
        "under writeback, locked or in use): planned again after min_residence",
        busy_.pages, ago(busy_.first), ago(busy_.last)));
  }
  if (promotion_full_.open(now)) {
    out.push_back(fmt::format(
        "node {} full for promotions: {} pages found no free memory there since {:.0f} s ago, "
        "the last {:.0f} s ago; hot pages wait on the slow node",
        promotion_full_.node, promotion_full_.pages, ago(promotion_full_.first),
        ago(promotion_full_.last)));
  }
}

}  // namespace kvtier::agent
