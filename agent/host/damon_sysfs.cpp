#include "agent/host/damon_sysfs.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include "agent/host/sysfs.hpp"
#include "policy/error.hpp"
#include "policy/types.hpp"

namespace kvtier::agent {

namespace fs = std::filesystem;

fs::path DamonSysfs::kdamond_dir(int kd) const {
  return admin_ / "kdamonds" / std::to_string(kd);
}

fs::path DamonSysfs::context_dir(int kd, int ctx) const {
  return kdamond_dir(kd) / "contexts" / std::to_string(ctx);
}

Result<void> DamonSysfs::write(const fs::path& file, std::string_view value) const {
  return write_text(file, value);
}

Result<int> DamonSysfs::nr_kdamonds() const {
  auto n = read_u64(admin_ / "kdamonds/nr_kdamonds");
  if (!n) return std::unexpected(n.error());
  return static_cast<int>(*n);
}

Result<void> DamonSysfs::set_nr_kdamonds(int n) {
  auto ok = write(admin_ / "kdamonds/nr_kdamonds", std::to_string(n));
  if (!ok && ok.error().code == EBUSY) {
    return fail(fmt::format("{}: the kernel refuses to change the number of kdamonds while one is "
                            "on; turn the others off first",
                            (admin_ / "kdamonds/nr_kdamonds").string()),
                EBUSY);
  }
  return ok;
}

Result<int> DamonSysfs::claim_kdamond() {
  auto n = nr_kdamonds();
  if (!n) return std::unexpected(n.error());
  for (int kd = 0; kd < *n; ++kd) {
    auto s = state(kd);
    if (!s) return std::unexpected(s.error());
    if (*s == "off") return kd;
  }
  if (*n == 0) {
    if (auto ok = set_nr_kdamonds(1); !ok) return std::unexpected(ok.error());
    return 0;
  }
  return fail(fmt::format("{}: all {} kdamonds are on (another DAMON user); kvtier needs one that "
                          "is off",
                          (admin_ / "kdamonds").string(), *n),
              EBUSY);
}

Result<void> DamonSysfs::configure(int kd, const DamonContextSpec& spec) const {
  const fs::path kdir = kdamond_dir(kd);
  if (auto ok = write(kdir / "contexts/nr_contexts", "1"); !ok) return ok;
  const fs::path ctx = context_dir(kd);
  if (auto ok = write(ctx / "operations", spec.operations); !ok) return ok;
  const fs::path attrs = ctx / "monitoring_attrs";
  const std::pair<const char*, std::uint64_t> values[] = {
      {"intervals/sample_us", spec.intervals.sample_us},
      {"intervals/aggr_us", spec.intervals.aggr_us},
      {"intervals/update_us", spec.intervals.update_us},
      {"nr_regions/min", spec.nr_regions.min},
      {"nr_regions/max", spec.nr_regions.max},
  };
  for (const auto& [file, value] : values) {
    if (auto ok = write(attrs / file, std::to_string(value)); !ok) return ok;
  }
  const fs::path targets = ctx / "targets";
  if (auto ok = write(targets / "nr_targets", std::to_string(spec.targets.size())); !ok) return ok;
  for (std::size_t i = 0; i < spec.targets.size(); ++i) {
    const auto& t = spec.targets[i];
    const fs::path tdir = targets / std::to_string(i);
    if (spec.operations != "paddr") {
      if (auto ok = write(tdir / "pid_target", std::to_string(t.pid)); !ok) return ok;
    }
    if (auto ok = set_regions(kd, i, t.regions); !ok) return ok;
  }
  return {};
}

Result<void> DamonSysfs::set_regions(int kd, std::size_t target,
                                     std::span<const AddrRange> regions) const {
  const fs::path dir = context_dir(kd) / "targets" / std::to_string(target) / "regions";
  if (auto ok = write(dir / "nr_regions", std::to_string(regions.size())); !ok) return ok;
  for (std::size_t r = 0; r < regions.size(); ++r) {
    const fs::path rdir = dir / std::to_string(r);
    // The kernel checks start < end and the order of the regions at on/commit.
    if (auto ok = write(rdir / "start", std::to_string(regions[r].start)); !ok) return ok;
    if (auto ok = write(rdir / "end", std::to_string(regions[r].end)); !ok) return ok;
  }
  return {};
}

Result<std::vector<std::string>> DamonSysfs::avail_operations(int kd) const {
  auto text = read_text(context_dir(kd) / "avail_operations");
  if (!text) return std::unexpected(text.error());
  std::vector<std::string> ops;
  std::string_view rest = *text;
  while (!rest.empty()) {
    const std::size_t sp = std::min(rest.find_first_of(" \n"), rest.size());
    if (sp > 0) ops.emplace_back(rest.substr(0, sp));
    rest.remove_prefix(std::min(sp + 1, rest.size()));
  }
  return ops;
}

Result<void> DamonSysfs::write_owner(const fs::path& file, int kd, Pid pid) const {
  return replace_file(file, fmt::format("kdamond {} pid {}\n", kd, pid));
}

std::optional<std::string> DamonSysfs::reclaim_leftover(const fs::path& file) const {
  std::ifstream in(file);
  if (!in) return std::nullopt;
  std::string kw1;
  std::string kw2;
  int kd = -1;
  Pid pid = 0;
  const bool parsed = static_cast<bool>(in >> kw1 >> kd >> kw2 >> pid) && kw1 == "kdamond" &&
                      kw2 == "pid" && kd >= 0 && pid > 0;
  in.close();
  std::error_code ec;
  fs::remove(file, ec);
  if (!parsed) return fmt::format("{}: not 'kdamond N pid P': ignored", file.string());
  auto st = state(kd);
  auto running = kdamond_pid(kd);
  if (!st || *st != "on" || !running || *running != pid) {
    return fmt::format("kdamond {} (pid {}) of a previous kvtierd is gone", kd, pid);
  }
  if (auto ok = turn_off(kd); !ok) {
    return fmt::format(
        "kdamond {} (pid {}) left on by a kvtierd that did not stop cleanly: cannot "
        "turn it off: {}",
        kd, pid, ok.error().message);
  }
  return fmt::format(
      "kdamond {} (pid {}) left on by a kvtierd that did not stop cleanly: turned off", kd, pid);
}

Result<void> DamonSysfs::send(int kd, std::string_view command) const {
  return write(kdamond_dir(kd) / "state", command);
}

Result<std::string> DamonSysfs::state(int kd) const {
  return read_text(kdamond_dir(kd) / "state");
}

Result<Pid> DamonSysfs::kdamond_pid(int kd) const {
  const fs::path p = kdamond_dir(kd) / "pid";
  auto text = read_text(p);
  if (!text) return std::unexpected(text.error());
  int pid = 0;
  auto [ptr, ec] = std::from_chars(text->data(), text->data() + text->size(), pid);
  if (ec != std::errc{} || ptr != text->data() + text->size() || pid <= 0) {
    return fail(fmt::format("{}: no running kdamond (pid '{}')", p.string(), *text));
  }
  return pid;
}

}  // namespace kvtier::agent
