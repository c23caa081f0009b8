// SPDX-License-Identifier: GPL-2.0
/* Migration accounting: what the kernel itself migrates (reclaim demotion,
 * NUMA balancing promotion, DAMOS, move_pages), per reason, from
 * migrate:mm_migrate_pages. */
#include "kvtier_abi.h" /* vmlinux.h first: the libbpf headers need its types */

#include <bpf/bpf_core_read.h>
#include <bpf/bpf_helpers.h>

struct {
  __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
  __uint(max_entries, KVT_MR_NR);
  __type(key, __u32);
  __type(value, struct kvt_migrate_counters);
} migrations SEC(".maps");

/* The kernel's enum migrate_reason renumbers between versions: map by name. */
static __always_inline __u32 kvt_reason(__u64 r) {
  if (r == bpf_core_enum_value(enum migrate_reason, MR_COMPACTION)) return KVT_MR_COMPACTION;
  if (r == bpf_core_enum_value(enum migrate_reason, MR_MEMORY_FAILURE))
    return KVT_MR_MEMORY_FAILURE;
  if (r == bpf_core_enum_value(enum migrate_reason, MR_MEMORY_HOTPLUG))
    return KVT_MR_MEMORY_HOTPLUG;
  if (r == bpf_core_enum_value(enum migrate_reason, MR_SYSCALL)) return KVT_MR_SYSCALL;
  if (r == bpf_core_enum_value(enum migrate_reason, MR_MEMPOLICY_MBIND))
    return KVT_MR_MEMPOLICY_MBIND;
  if (r == bpf_core_enum_value(enum migrate_reason, MR_NUMA_MISPLACED))
    return KVT_MR_NUMA_MISPLACED;
  if (r == bpf_core_enum_value(enum migrate_reason, MR_CONTIG_RANGE)) return KVT_MR_CONTIG_RANGE;
  if (r == bpf_core_enum_value(enum migrate_reason, MR_LONGTERM_PIN)) return KVT_MR_LONGTERM_PIN;
  if (r == bpf_core_enum_value(enum migrate_reason, MR_DEMOTION)) return KVT_MR_DEMOTION;
  if (bpf_core_enum_value_exists(enum migrate_reason, MR_DAMON) &&
      r == bpf_core_enum_value(enum migrate_reason, MR_DAMON))
    return KVT_MR_DAMON;
  return KVT_MR_OTHER;
}

static __always_inline void account(struct bpf_raw_tracepoint_args* ctx, __u64 reason) {
  __u32 key = kvt_reason(reason);
  struct kvt_migrate_counters* c = bpf_map_lookup_elem(&migrations, &key);
  if (!c) return;
  c->calls += 1;
  c->succeeded += ctx->args[0];
  c->failed += ctx->args[1];
  c->thp_succeeded += ctx->args[2];
  c->thp_failed += ctx->args[3];
  c->thp_split += ctx->args[4];
}

/* The reason is the tracepoint's last argument and the number of arguments
 * before it has changed across kernels (6.7 added large_folio_split). Reading
 * past the last argument makes the attach fail, so there is one program per
 * prototype and the agent loads the one the kernel's BTF matches. */
SEC("raw_tp/mm_migrate_pages")
int kvt_mm_migrate_pages8(struct bpf_raw_tracepoint_args* ctx) {
  account(ctx, ctx->args[7]);
  return 0;
}

SEC("raw_tp/mm_migrate_pages")
int kvt_mm_migrate_pages7(struct bpf_raw_tracepoint_args* ctx) {
  account(ctx, ctx->args[6]);
  return 0;
}

char LICENSE[] SEC("license") = "GPL";
