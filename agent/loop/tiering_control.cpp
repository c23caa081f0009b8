#include "agent/loop/tiering_control.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <utility>

#include "agent/host/numa_tiering.hpp"
#include "agent/loop/loop_state.hpp"
#include "policy/config.hpp"
#include "policy/types.hpp"
#include "policy/units.hpp"

namespace kvtier::agent {
namespace {

// The scan period that brings `rate` hint faults a second to `budget`: longer in
// proportion above it (at most 8 times a step, at most kMaxPacedScanPeriod),
// halved back toward `base` below a quarter of it, else `cur`.
TimeNs paced_period(TimeNs cur, TimeNs base, double rate, double budget) {
  if (rate > budget) {
    const double longer = static_cast<double>(cur) * std::min(8.0, rate / budget);
    return std::min(static_cast<TimeNs>(longer), std::max(policy::kMaxPacedScanPeriod, base));
  }
  if (rate < budget / 4 && cur > base) return std::max(base, cur / 2);
  return cur;
}

// The config's [tiering] as the kernel's knobs, with `threshold` resolved.
TieringWish wish(const policy::TieringConfig& c, std::optional<TimeNs> threshold) {
  const auto ms = [](std::optional<TimeNs> t) {
    return t ? std::optional<std::uint64_t>(*t / 1'000'000) : std::nullopt;
  };
  const auto mib = [](std::optional<std::uint64_t> b) {
    return b ? std::optional<std::uint64_t>(*b >> 20) : std::nullopt;
  };
  const std::uint64_t bits =
      c.numa_balancing == policy::NumaBalancingMode::kTiering
          ? kNumaBalancingNormal | kNumaBalancingTiering
          : (c.numa_balancing == policy::NumaBalancingMode::kTieringOnly ? kNumaBalancingTiering
                                                                         : 0);
  return TieringWish{
      .balancing_bits = bits,
      .hot_threshold_ms = ms(threshold),
      .scan_period_min_ms = ms(c.scan_period_min),
      .scan_period_max_ms = ms(c.scan_period_max),
      .scan_size_mb = mib(c.scan_size),
      // "MB/s" in 2^20 bytes, as MiB/s (kernel/sched/fair.c shifts it by 20 - PAGE_SHIFT).
      .promote_rate_limit_mbps = mib(c.promote_rate_limit)};
}

}  // namespace

TieringControl::TieringControl(std::unique_ptr<KernelTiering> tiering, LoopState& state)
    : tiering_(std::move(tiering)), s_(state) {
  s_.kernel_tiering = tiering_ != nullptr;
}

void TieringControl::sync(bool watch) {
  const bool watch_changed = s_.config.config.tiering.promote_threshold == policy::kPromoteAuto &&
                             s_.tiering_saw_watch != watch;
  if (!s_.tiering_applied || watch_changed) apply(watch);
}

void TieringControl::apply(bool watch) {
  s_.tiering_applied = true;
  s_.tiering_saw_watch = watch;
  if (!tiering_) return;
  const auto& c = s_.config.config.tiering;
  std::optional<TimeNs> threshold = c.promote_threshold;
  if (threshold == policy::kPromoteAuto) {
    threshold = s_.tiering_saw_watch ? policy::kPromoteByKvtier : policy::kPromoteOnFirstAccess;
  }
  s_.fault_path_promotions = threshold != policy::kPromoteByKvtier;
  auto changed = tiering_->apply(wish(c, threshold));
  if (changed) {
    s_.tiering_error.clear();
    for (const auto& line : *changed) spdlog::info("tiering: {}", line);
    s_.tiering_changes.insert(s_.tiering_changes.end(), changed->begin(), changed->end());
  } else {
    s_.tiering_error = changed.error().message;
    spdlog::warn("tiering: {}: accesses to demoted pages may go unseen and unpromoted",
                 changed.error().message);
  }
  s_.tiering = tiering_->read();
}

// The kernel scans a process once per scan period of its own CPU time, so a
// server running flat out is unmapped, and faults, many times as often as one
// that waits: kvtierd keeps the host's hint faults near [tiering]
// max_hint_faults_per_sec by lengthening both periods, and gives the configured
// ones back once the faults are few.
void TieringControl::pace(TimeNs now) {
  const auto& c = s_.config.config.tiering;
  auto& p = s_.scan_pacing;
  if (!tiering_ || c.max_hint_faults_per_sec == 0 || !c.scan_period_min || !c.scan_period_max) {
    return;
  }
  auto faults = tiering_->hint_faults();
  if (!faults) return;
  const auto last = std::exchange(p.last, std::pair{now, *faults});
  if (!last || now <= last->first || *faults < last->second) return;
  const double rate =
      static_cast<double>(*faults - last->second) * 1e9 / static_cast<double>(now - last->first);
  p.faults_per_sec = rate;
  const TimeNs base = *c.scan_period_min;
  const TimeNs cur = p.period.value_or(base);
  const TimeNs next = paced_period(cur, base, rate, static_cast<double>(c.max_hint_faults_per_sec));
  if (next == cur) return;
  // The max keeps its ratio to the min, as configured.
  const TimeNs next_max =
      std::min(*c.scan_period_max / base * next, TimeNs{3600} * policy::kNsPerSec);
  auto changed = tiering_->apply(
      TieringWish{.scan_period_min_ms = static_cast<std::uint64_t>(next / 1'000'000),
                  .scan_period_max_ms = static_cast<std::uint64_t>(next_max / 1'000'000)});
  if (!changed) {
    spdlog::warn("tiering: pacing the NUMA scan: {}", changed.error().message);
    return;
  }
  spdlog::info(
      "tiering: {:.0f} NUMA hint faults/s against max_hint_faults_per_sec {}: scan "
      "period {} ms (configured {} ms)",
      rate, c.max_hint_faults_per_sec, next / 1'000'000, base / 1'000'000);
  p.period = next == base ? std::nullopt : std::optional<TimeNs>(next);
  s_.tiering = tiering_->read();
}

void TieringControl::restore() {
  if (!tiering_) return;
  for (const auto& line : tiering_->restore()) spdlog::info("tiering: {}", line);
}

}  // namespace kvtier::agent
