// SPDX-License-Identifier: GPL-2.0
/* DAMON reader: forwards every region DAMON reports at the end of each
 * aggregation interval (damon:damon_aggregated) to the agent through a ring
 * buffer, for the kdamonds the agent started only. The raw tracepoint's
 * arguments (target index, region, number of regions) are the same on 6.12
 * and 6.18; the region fields are read with CO-RE. */
#include "kvtier_abi.h" /* vmlinux.h first: the libbpf headers need its types */

#include <bpf/bpf_core_read.h>
#include <bpf/bpf_helpers.h>

/* Pids of the kdamond threads the agent owns; other kdamonds (another tool's
 * paddr monitor, say) are ignored in the kernel. */
struct {
  __uint(type, BPF_MAP_TYPE_HASH);
  __uint(max_entries, KVT_MAX_KDAMONDS);
  __type(key, __u32);
  __type(value, __u8);
} kdamonds SEC(".maps");

struct {
  __uint(type, BPF_MAP_TYPE_RINGBUF);
  __uint(max_entries, 1 << 20);
} regions SEC(".maps");

/* [0] regions forwarded, [1] regions dropped because the ring was full. */
struct {
  __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
  __uint(max_entries, 2);
  __type(key, __u32);
  __type(value, __u64);
} damon_stats SEC(".maps");

static __always_inline void count(__u32 idx) {
  __u64* v = bpf_map_lookup_elem(&damon_stats, &idx);
  if (v) *v += 1;
}

SEC("raw_tp/damon_aggregated")
int kvt_damon_aggregated(struct bpf_raw_tracepoint_args* ctx) {
  __u32 pid = (__u32)bpf_get_current_pid_tgid();
  if (!bpf_map_lookup_elem(&kdamonds, &pid)) return 0;
  struct damon_region* r = (struct damon_region*)ctx->args[1];
  struct kvt_damon_region* e = bpf_ringbuf_reserve(&regions, sizeof(*e), 0);
  if (!e) {
    count(1);
    return 0;
  }
  e->time_ns = bpf_ktime_get_ns();
  e->start = BPF_CORE_READ(r, ar.start);
  e->end = BPF_CORE_READ(r, ar.end);
  e->target_id = (__u32)ctx->args[0];
  e->nr_regions = (__u32)ctx->args[2];
  e->nr_accesses = BPF_CORE_READ(r, nr_accesses);
  e->age = BPF_CORE_READ(r, age);
  e->kdamond_pid = pid;
  e->pad = 0;
  bpf_ringbuf_submit(e, 0);
  count(0);
  return 0;
}

char LICENSE[] SEC("license") = "GPL";
