#include "agent/sources/probes.hpp"

#include <bpf/btf.h>
#include <fmt/format.h>

#include <linux/capability.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <cstddef>
#include <sstream>

#include <array>
#include <cerrno>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <system_error>

#include "agent/host/availability.hpp"
#include "agent/host/host_paths.hpp"
#include "agent/host/sysfs.hpp"
#include "policy/error.hpp"

namespace kvtier::agent {

namespace fs = std::filesystem;

namespace {

fs::path btf_path(const HostPaths& paths) {
  return paths.sys / "kernel/btf/vmlinux";
}

struct BtfFree {
  void operator()(struct btf* b) const { btf__free(b); }
};

bool path_exists(const fs::path& p) {
  std::error_code ec;
  return fs::exists(p, ec);
}

// The number of arguments of a tracepoint, from a parse of the kernel's BTF that
// is freed on return: the parse takes 5 to 6 MiB of heap, in the DRAM kvtierd
// keeps for the workload.
Result<int> count_tracepoint_args(const fs::path& path, std::string_view event) {
  const std::unique_ptr<struct btf, BtfFree> btf(btf__parse(path.c_str(), nullptr));
  if (!btf) {
    const int err = errno;
    return fail(fmt::format("{}: cannot parse kernel BTF: {}", path.string(), errno_text(err)),
                err);
  }
  const std::string name = fmt::format("btf_trace_{}", event);
  const int id = btf__find_by_name_kind(btf.get(), name.c_str(), BTF_KIND_TYPEDEF);
  if (id < 0) {
    return fail(fmt::format("{}: no {} (this kernel has no such tracepoint)", path.string(), name),
                ENOENT);
  }
  // typedef -> pointer -> function prototype whose first parameter is the
  // tracepoint's private data, not one of its arguments.
  const struct btf_type* t = btf__type_by_id(btf.get(), static_cast<__u32>(id));
  if (t != nullptr && btf_is_typedef(t)) t = btf__type_by_id(btf.get(), t->type);
  if (t != nullptr && btf_is_ptr(t)) t = btf__type_by_id(btf.get(), t->type);
  if (t == nullptr || !btf_is_func_proto(t) || btf_vlen(t) < 1) {
    return fail(fmt::format("{}: {} is not a function pointer typedef", path.string(), name));
  }
  return static_cast<int>(btf_vlen(t)) - 1;
}

}  // namespace

Availability probe_btf(const HostPaths& paths) {
  const fs::path p = btf_path(paths);
  if (!path_exists(p)) {
    return refused_by_kernel(
        fmt::format("no BTF: {} missing (kernel built without CONFIG_DEBUG_INFO_BTF)", p.string()));
  }
  return available();
}

Availability probe_bpf_kernel_reads(const HostPaths& paths, std::string_view what) {
  // "none integrity [confidentiality]": the mode in brackets is the one in force.
  const fs::path p = paths.sys / "kernel/security/lockdown";
  const auto text = read_text(p);
  if (text && text->find("[confidentiality]") != std::string::npos) {
    return refused_by_kernel(fmt::format(
        "kernel lockdown is confidentiality ({}): it bars the BPF programs of {} from reading "
        "kernel memory (bpf_probe_read_kernel); boot without lockdown=confidentiality",
        p.string(), what));
  }
  return available();
}

bool has_effective_capability(int cap) {
  __user_cap_header_struct hdr{.version = _LINUX_CAPABILITY_VERSION_3, .pid = 0};
  std::array<__user_cap_data_struct, 2> data{};
  if (syscall(SYS_capget, &hdr, data.data()) != 0) return false;
  const auto idx = static_cast<std::size_t>(cap / 32);
  if (idx >= data.size()) return false;
  return (data.at(idx).effective & (1U << (static_cast<unsigned>(cap) % 32U))) != 0;
}

Availability probe_bpf_privileges() {
  constexpr int kCapSysAdmin = 21;
  constexpr int kCapPerfmon = 38;
  constexpr int kCapBpf = 39;
  if (has_effective_capability(kCapSysAdmin)) return available();
  if (!has_effective_capability(kCapBpf)) {
    return {.why = "no CAP_BPF: run kvtier as root or grant CAP_BPF and CAP_PERFMON",
            .missing_capability = true};
  }
  if (!has_effective_capability(kCapPerfmon)) {
    return {.why = "no CAP_PERFMON: grant CAP_PERFMON alongside CAP_BPF",
            .missing_capability = true};
  }
  return available();
}

Availability probe_tracepoint(const HostPaths& paths, std::string_view category,
                              std::string_view event) {
  const fs::path tracefs = paths.sys / "kernel/tracing";
  const fs::path dir = tracefs / "events" / category / event;
  if (path_exists(dir)) return available();
  if (path_exists(tracefs / "events")) {
    return unavailable(
        fmt::format("tracepoint {}:{} missing: no {}", category, event, dir.string()));
  }
  // tracefs not mounted: raw tracepoints do not need it, the kernel's BTF says
  // whether the tracepoint exists.
  if (auto btf = probe_btf(paths); !btf.ok) {
    return unavailable(fmt::format("tracepoint {}:{} unknown: tracefs not mounted and {}", category,
                                   event, btf.why));
  }
  auto n = tracepoint_arg_count(paths, event);
  if (!n)
    return unavailable(
        fmt::format("tracepoint {}:{} missing: {}", category, event, n.error().message));
  return available();
}

Result<int> tracepoint_arg_count(const HostPaths& paths, std::string_view event) {
  // A parse takes tens of milliseconds and probes ask again when the source
  // starts: the answers are kept, not the BTF.
  static std::mutex mu;
  static std::map<std::string, Result<int>> answers;
  const fs::path path = btf_path(paths);
  const std::string key = fmt::format("{}\n{}", path.string(), event);
  const std::scoped_lock lock(mu);
  auto it = answers.find(key);
  if (it == answers.end()) it = answers.emplace(key, count_tracepoint_args(path, event)).first;
  return it->second;
}

Availability probe_damon_vaddr(const HostPaths& paths) {
  const fs::path admin = paths.sys / "kernel/mm/damon/admin";
  if (!path_exists(admin)) {
    return unavailable(
        fmt::format("no DAMON sysfs: {} missing (CONFIG_DAMON_SYSFS)", admin.string()));
  }
  // A context lists the operation sets the kernel registered; with no context
  // yet, the vaddr implementation's symbols tell the same.
  std::error_code ec;
  for (const auto& kd : fs::directory_iterator(admin / "kdamonds", ec)) {
    auto ops = read_text(kd.path() / "contexts/0/avail_operations");
    if (!ops) continue;
    // One name per line on 6.12 and later, space-separated on older kernels.
    std::istringstream names(*ops);
    for (std::string name; names >> name;) {
      if (name == "vaddr") return available();
    }
    return unavailable(fmt::format("no DAMON vaddr: {} lists only '{}' (CONFIG_DAMON_VADDR)",
                                   (kd.path() / "contexts/0/avail_operations").string(), *ops));
  }
  auto syms = read_text(paths.proc / "kallsyms");
  if (syms && syms->find(" damon_va_") != std::string::npos) return available();
  return unavailable(
      fmt::format("no DAMON vaddr: no context to ask and no damon_va_* symbol in {} "
                  "(CONFIG_DAMON_VADDR)",
                  (paths.proc / "kallsyms").string()));
}

Availability probe_page_idle(const HostPaths& paths) {
  const fs::path bitmap = paths.sys / "kernel/mm/page_idle/bitmap";
  if (!path_exists(bitmap)) {
    return unavailable(fmt::format("no idle page tracking: {} missing (CONFIG_IDLE_PAGE_TRACKING)",
                                   bitmap.string()));
  }
  if (access(bitmap.c_str(), R_OK | W_OK) != 0) {
    const int err = errno;
    return unavailable(
        fmt::format("idle page tracking: {}: {} (run as root)", bitmap.string(), errno_text(err)));
  }
  return available();
}

}  // namespace kvtier::agent
