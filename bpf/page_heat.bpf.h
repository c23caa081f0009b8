/* The per-page heat maps and the record step shared by the page samplers
 * (sampler.bpf.c, faults.bpf.c). Each program gets its own copy of the maps;
 * the agent fills `targets` and reads `pages` and `stats`. */
#ifndef KVTIER_PAGE_HEAT_BPF_H
#define KVTIER_PAGE_HEAT_BPF_H

#include "kvtier_abi.h" /* vmlinux.h first: the libbpf headers need its types */

#include <bpf/bpf_helpers.h>

/* A hash the agent fills rather than rodata: targets come and go at run time. */
struct {
  __uint(type, BPF_MAP_TYPE_HASH);
  __uint(max_entries, KVT_MAX_TARGETS);
  __type(key, __u32);
  __type(value, __u8);
} targets SEC(".maps");

/* LRU so a sampler that outgrows its budget forgets the coldest pages first
 * instead of refusing new ones. */
struct {
  __uint(type, BPF_MAP_TYPE_LRU_HASH);
  __uint(max_entries, KVT_MAX_PAGES);
  __type(key, struct kvt_page_key);
  __type(value, struct kvt_page_val);
} pages SEC(".maps");

struct {
  __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
  __uint(max_entries, KVT_STAT_NR);
  __type(key, __u32);
  __type(value, __u64);
} stats SEC(".maps");

static __always_inline void kvt_count(__u32 stat) {
  __u64* v = bpf_map_lookup_elem(&stats, &stat);
  if (v) *v += 1; /* per-CPU slot: no atomics needed */
}

/* The tgid of the current task if it is a target, else 0. */
static __always_inline __u32 kvt_current_target(void) {
  __u32 tgid = (__u32)(bpf_get_current_pid_tgid() >> 32);
  kvt_count(KVT_STAT_EVENTS);
  if (!bpf_map_lookup_elem(&targets, &tgid)) return 0;
  kvt_count(KVT_STAT_MATCHED);
  return tgid;
}

static __always_inline void kvt_record(__u32 tgid, __u64 addr, __u64 weight, __u32 flags) {
  struct kvt_page_key key = {.tgid = tgid, .pad = 0, .page = addr >> 12};
  __u64 now = bpf_ktime_get_ns();
  struct kvt_page_val* v = bpf_map_lookup_elem(&pages, &key);
  if (!v) {
    struct kvt_page_val init = {
        .samples = 1, .weight = weight, .first_ns = now, .last_ns = now, .flags = flags};
    if (bpf_map_update_elem(&pages, &key, &init, BPF_NOEXIST) == 0) return;
    /* Another CPU inserted the same page meanwhile: add to its entry. */
    v = bpf_map_lookup_elem(&pages, &key);
    if (!v) {
      kvt_count(KVT_STAT_MAP_FULL);
      return;
    }
  }
  __sync_fetch_and_add(&v->samples, 1);
  __sync_fetch_and_add(&v->weight, weight);
  v->last_ns = now;
  if (flags && !(v->flags & flags)) v->flags |= flags;
}

#endif /* KVTIER_PAGE_HEAT_BPF_H */
