// SPDX-License-Identifier: GPL-2.0
/* Process lifecycle: exec, new processes (not threads) and the exit of a
 * process's last thread, through a ring buffer, so the agent finds targets as
 * they start and forgets them when they end. Raw tracepoints: the task is the
 * first argument on every kernel kvtier supports (6.18 appends group_dead to
 * sched_process_exit; this program reads signal->live instead). */
#include "kvtier_abi.h" /* vmlinux.h first: the libbpf headers need its types */

#include <bpf/bpf_core_read.h>
#include <bpf/bpf_helpers.h>

struct {
  __uint(type, BPF_MAP_TYPE_RINGBUF);
  __uint(max_entries, 1 << 18);
} events SEC(".maps");

/* Events lost because the ring was full. */
struct {
  __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
  __uint(max_entries, 1);
  __type(key, __u32);
  __type(value, __u64);
} procs_dropped SEC(".maps");

static __always_inline void emit(__u32 kind, struct task_struct* p, __u32 exit_code) {
  struct kvt_proc_event* e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);
  if (!e) {
    __u32 zero = 0;
    __u64* d = bpf_map_lookup_elem(&procs_dropped, &zero);
    if (d) *d += 1;
    return;
  }
  e->time_ns = bpf_ktime_get_ns();
  e->kind = kind;
  e->pid = (__u32)BPF_CORE_READ(p, tgid);
  e->ppid = (__u32)BPF_CORE_READ(p, real_parent, tgid);
  e->exit_code = exit_code;
  BPF_CORE_READ_STR_INTO(&e->comm, p, comm);
  bpf_ringbuf_submit(e, 0);
}

SEC("raw_tp/sched_process_exec")
int kvt_proc_exec(struct bpf_raw_tracepoint_args* ctx) {
  emit(KVT_PROC_EXEC, (struct task_struct*)ctx->args[0], 0);
  return 0;
}

SEC("raw_tp/sched_process_fork")
int kvt_proc_fork(struct bpf_raw_tracepoint_args* ctx) {
  struct task_struct* child = (struct task_struct*)ctx->args[1];
  if (BPF_CORE_READ(child, pid) != BPF_CORE_READ(child, tgid)) return 0; /* a thread */
  emit(KVT_PROC_FORK, child, 0);
  return 0;
}

SEC("raw_tp/sched_process_exit")
int kvt_proc_exit(struct bpf_raw_tracepoint_args* ctx) {
  struct task_struct* p = (struct task_struct*)ctx->args[0];
  /* Threads exit one by one; the process is gone when the last one does. */
  if (BPF_CORE_READ(p, signal, live.counter) != 0) return 0;
  emit(KVT_PROC_EXIT, p, (__u32)BPF_CORE_READ(p, exit_code));
  return 0;
}

char LICENSE[] SEC("license") = "GPL";
