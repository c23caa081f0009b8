#include "agent/sources/process_watcher.hpp"

#include <bpf/libbpf.h>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <utility>
#include <vector>

#include "agent/host/availability.hpp"
#include "agent/host/host_paths.hpp"
#include "agent/sources/bpf_events.hpp"
#include "agent/sources/bpf_skeleton.hpp"
#include "agent/sources/page_heat_maps.hpp"
#include "agent/sources/probes.hpp"
#include "policy/error.hpp"
#include "procs.skel.h"

namespace kvtier::agent {

struct RingBufferFree {
  void operator()(ring_buffer* rb) const { ring_buffer__free(rb); }
};

struct ProcessWatcher::Bpf {
  BpfSkeleton<procs_bpf> skel{"process watcher (bpf/procs.bpf.c)"};
  std::unique_ptr<ring_buffer, RingBufferFree> ring;
  std::vector<ProcEvent>* out = nullptr;
  std::uint64_t bad = 0;
};

namespace {

int on_event(void* ctx, void* data, size_t size) {
  auto* b = static_cast<ProcessWatcher::Bpf*>(ctx);
  auto ev =
      decode_proc_event(std::span<const std::byte>(static_cast<const std::byte*>(data), size));
  if (!ev) {
    ++b->bad;
    return 0;
  }
  b->out->push_back(std::move(*ev));
  return 0;
}

}  // namespace

ProcessWatcher::ProcessWatcher(HostPaths paths) : paths_(std::move(paths)) {}
ProcessWatcher::~ProcessWatcher() {
  stop();
}

Availability ProcessWatcher::probe() const {
  if (auto a = probe_btf(paths_); !a.ok) return a;
  if (auto a = probe_bpf_kernel_reads(paths_, "the process watcher"); !a.ok) return a;
  if (auto a = probe_bpf_privileges(); !a.ok) return a;
  for (const char* tp : {"sched_process_exec", "sched_process_fork", "sched_process_exit"}) {
    if (auto a = probe_tracepoint(paths_, "sched", tp); !a.ok) return a;
  }
  return available("ok: exec, fork and exit through sched tracepoints");
}

Result<void> ProcessWatcher::start() {
  if (bpf_) return {};
  auto b = std::make_unique<Bpf>();
  if (auto ok = b->skel.open(); !ok) return ok;
  if (auto ok = b->skel.load(); !ok) return ok;
  if (auto ok = b->skel.attach(); !ok) return ok;
  b->ring.reset(ring_buffer__new(bpf_map__fd(b->skel->maps.events), on_event, b.get(), nullptr));
  if (!b->ring) {
    const int err = errno;
    return fail(fmt::format("process watcher: ring_buffer__new: {}", errno_text(err)), err);
  }
  bpf_ = std::move(b);
  return {};
}

void ProcessWatcher::stop() {
  bpf_.reset();
}

int ProcessWatcher::epoll_fd() const {
  return bpf_ ? ring_buffer__epoll_fd(bpf_->ring.get()) : -1;
}

Result<std::size_t> ProcessWatcher::poll(int timeout_ms, std::vector<ProcEvent>& out) {
  if (!bpf_) return fail("process watcher: poll() before start()");
  const std::size_t before = out.size();
  bpf_->out = &out;
  const int rc = timeout_ms > 0 ? ring_buffer__poll(bpf_->ring.get(), timeout_ms)
                                : ring_buffer__consume(bpf_->ring.get());
  bpf_->out = nullptr;
  if (rc < 0 && rc != -EINTR) {
    return fail(fmt::format("process watcher: ring buffer: {}", errno_text(-rc)), -rc);
  }
  return out.size() - before;
}

Result<std::uint64_t> ProcessWatcher::dropped() const {
  if (!bpf_) return fail("process watcher: not started");
  auto s = sum_percpu_u64(bpf_map__fd(bpf_->skel->maps.procs_dropped), 1);
  if (!s) return std::unexpected(s.error());
  return (*s)[0];
}

std::vector<int> ProcessWatcher::program_fds() const {
  if (!bpf_) return {};
  return {bpf_program__fd(bpf_->skel->progs.kvt_proc_exec),
          bpf_program__fd(bpf_->skel->progs.kvt_proc_fork),
          bpf_program__fd(bpf_->skel->progs.kvt_proc_exit)};
}

}  // namespace kvtier::agent
