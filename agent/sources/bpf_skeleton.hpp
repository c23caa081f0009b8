#pragma once
// RAII over a bpftool-generated skeleton: open -> (set rodata, map sizes,
// autoload) -> load -> attach; destruction detaches and frees everything.
// Skel is the generated struct (e.g. sampler_bpf), whose C++ static members
// open/load/attach/destroy bpftool 7 emits.

#include <fmt/format.h>

#include <cerrno>
#include <string>
#include <utility>

#include "agent/sources/libbpf_log.hpp"
#include "policy/error.hpp"

namespace kvtier::agent {

template <class Skel>
class BpfSkeleton {
 public:
  explicit BpfSkeleton(std::string what) : what_(std::move(what)) {}
  ~BpfSkeleton() { reset(); }
  BpfSkeleton(const BpfSkeleton&) = delete;
  BpfSkeleton& operator=(const BpfSkeleton&) = delete;
  BpfSkeleton(BpfSkeleton&& o) noexcept
      : what_(std::move(o.what_)), skel_(std::exchange(o.skel_, nullptr)) {}
  BpfSkeleton& operator=(BpfSkeleton&& o) noexcept {
    if (this != &o) {
      reset();
      what_ = std::move(o.what_);
      skel_ = std::exchange(o.skel_, nullptr);
    }
    return *this;
  }

  Result<void> open() {
    install_libbpf_logger();
    reset();
    skel_ = Skel::open();
    if (skel_ == nullptr) {
      const int err = errno;
      return fail(fmt::format("{}: cannot open the BPF object: {}", what_, errno_text(err)), err);
    }
    return {};
  }

  Result<void> load() {
    if (const int rc = Skel::load(skel_); rc != 0) {
      return fail(fmt::format("{}: the kernel refused the BPF programs: {} (run as root with BTF; "
                              "the libbpf log above has the verifier's reason)",
                              what_, errno_text(-rc)),
                  -rc);
    }
    return {};
  }

  // Attaches every program whose section names its hook (tracepoints);
  // perf_event programs are attached by their owner, one link per CPU.
  Result<void> attach() {
    if (const int rc = Skel::attach(skel_); rc != 0) {
      return fail(fmt::format("{}: cannot attach the BPF programs: {}", what_, errno_text(-rc)),
                  -rc);
    }
    return {};
  }

  void reset() {
    if (skel_ != nullptr) Skel::destroy(skel_);
    skel_ = nullptr;
  }

  [[nodiscard]] bool is_open() const { return skel_ != nullptr; }
  Skel* operator->() const { return skel_; }
  [[nodiscard]] Skel* get() const { return skel_; }
  [[nodiscard]] const std::string& what() const { return what_; }

 private:
  std::string what_;
  Skel* skel_ = nullptr;
};

}  // namespace kvtier::agent
