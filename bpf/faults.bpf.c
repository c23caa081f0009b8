// SPDX-License-Identifier: GPL-2.0
/* Fault sampler: every user page fault of a target process (first touch,
 * copy-on-write, and NUMA hint faults when NUMA balancing scans) counted per
 * (tgid, page). A raw tracepoint, so no tracefs mount is needed; its
 * arguments (address, regs, error_code) are the same on 6.12 and 6.18. */
#include "page_heat.bpf.h"

/* x86 page-fault error code bits (arch/x86/include/asm/trap_pf.h). */
#define KVT_PF_PROT (1UL << 0)

/* The return watch: chunks of memory kvtier demoted, armed by the agent. LRU,
 * so a watch that outgrows its size forgets the longest-armed (coldest) chunks,
 * which the ordinary samples above still cover. */
struct {
  __uint(type, BPF_MAP_TYPE_LRU_HASH);
  __uint(max_entries, KVT_MAX_RETURN_CHUNKS);
  __type(key, struct kvt_return_key);
  __type(value, __u8);
} returns SEC(".maps");

struct {
  __uint(type, BPF_MAP_TYPE_RINGBUF);
  __uint(max_entries, 64 * 1024);
} return_events SEC(".maps");

/* The first fault in an armed chunk wakes the agent, which promotes the chunk
 * from its own thread: the fault path itself copies nothing. Deleting first
 * makes the report once per arming, however many pages of the chunk fault. */
static __always_inline void kvt_watch_return(__u32 tgid, __u64 addr) {
  struct kvt_return_key key = {.tgid = tgid, .chunk = (__u32)(addr >> KVT_RETURN_SHIFT)};
  if (bpf_map_delete_elem(&returns, &key) != 0) return;
  kvt_count(KVT_STAT_RETURNS);
  struct kvt_return_event ev = {.time_ns = bpf_ktime_get_ns(), .tgid = tgid, .chunk = key.chunk};
  if (bpf_ringbuf_output(&return_events, &ev, sizeof(ev), 0) != 0) kvt_count(KVT_STAT_RETURN_LOST);
}

SEC("raw_tp/page_fault_user")
int kvt_fault_user(struct bpf_raw_tracepoint_args* ctx) {
  __u32 tgid = kvt_current_target();
  if (!tgid) return 0;
  __u64 addr = ctx->args[0];
  __u64 err = ctx->args[2];
  __u32 flags = 0;
  /* Faults on present pages are write-protect faults; first touches and NUMA
   * hint faults (PROT_NONE ptes are not present to the hardware) are not. */
  if (err & KVT_PF_PROT) {
    flags = KVT_PAGE_PROT_FAULT;
    kvt_count(KVT_STAT_PROT_FAULT);
  }
  /* A write-protect fault (the dirty source's) is an access too: a block the
   * pool reuses is written before it is read. */
  kvt_watch_return(tgid, addr);
  kvt_record(tgid, addr, 1, flags);
  return 0;
}

char LICENSE[] SEC("license") = "GPL";
