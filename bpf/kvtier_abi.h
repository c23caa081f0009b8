/* The ABI shared by the BPF programs and the agent: fixed-width structs only,
 * so the same header compiles for -target bpf and for user space. Every struct
 * is padded explicitly so its layout is the same on both sides. */
#ifndef KVTIER_ABI_H
#define KVTIER_ABI_H

#ifdef __bpf__
#include "vmlinux.h"
#else
#include <linux/types.h>
#endif

#define KVT_COMM_LEN 16

/* Default map sizes; the agent may change them before load. */
#define KVT_MAX_TARGETS 1024
#define KVT_MAX_PAGES 65536
#define KVT_MAX_KDAMONDS 16
#define KVT_MAX_RETURN_CHUNKS 65536

/* The return watch (faults.bpf.c) arms memory kvtier demoted in chunks of
 * 1 << KVT_RETURN_SHIFT bytes (64 KiB: a layer's share of a KV block in most
 * engines); the first fault in an armed chunk disarms it and reports it. */
#define KVT_RETURN_SHIFT 16

struct kvt_return_key {
  __u32 tgid;
  __u32 chunk; /* virtual address >> KVT_RETURN_SHIFT (user addresses are < 2^47) */
};

/* Through a ring buffer: an armed chunk was touched. */
struct kvt_return_event {
  __u64 time_ns; /* bpf_ktime_get_ns() of the fault */
  __u32 tgid;
  __u32 chunk;
};

/* Key of the per-page heat maps (sampler and faults): one entry per target
 * process and 4 KiB virtual page. */
struct kvt_page_key {
  __u32 tgid;
  __u32 pad;
  __u64 page; /* virtual address >> 12 */
};

/* samples: how many times the page was seen; weight: the accesses those
 * samples stand for (sum of the sampling periods); flags: KVT_PAGE_*. */
struct kvt_page_val {
  __u64 samples;
  __u64 weight;
  __u64 first_ns; /* bpf_ktime_get_ns() of the first sample since the last drain */
  __u64 last_ns;  /* and of the latest */
  __u32 flags;
  __u32 pad;
};

/* Set on a page when a fault hit a present page (x86 error code bit 0):
 * write protection (copy-on-write, or the fault that follows a NUMA
 * migration). NUMA hint faults do not set it: a PROT_NONE pte is not present
 * to the hardware, so they look like first touches (measured in the guest). */
#define KVT_PAGE_PROT_FAULT 1u

/* Per-CPU counters of the page samplers, indexed by enum kvt_sample_stat. */
enum kvt_sample_stat {
  KVT_STAT_EVENTS = 0,      /* program runs */
  KVT_STAT_MATCHED = 1,     /* runs in a target process */
  KVT_STAT_NO_ADDR = 2,     /* target runs without a data address */
  KVT_STAT_MAP_FULL = 3,    /* insertions that failed */
  KVT_STAT_PROT_FAULT = 4,  /* faults on present pages (write protection) */
  KVT_STAT_RETURNS = 5,     /* faults in an armed chunk (the return watch) */
  KVT_STAT_RETURN_LOST = 6, /* of those, not reported: the ring buffer was full */
  KVT_STAT_NR = 7,
};

/* Process lifecycle, from procs.bpf.c through a ring buffer. */
enum kvt_proc_kind {
  KVT_PROC_EXEC = 1,
  KVT_PROC_FORK = 2, /* a new process (not a new thread) */
  KVT_PROC_EXIT = 3, /* the last thread of a process exited */
};

struct kvt_proc_event {
  __u64 time_ns;
  __u32 kind; /* enum kvt_proc_kind */
  __u32 pid;  /* tgid of the process the event is about */
  __u32 ppid; /* tgid of its parent */
  __u32 exit_code;
  char comm[KVT_COMM_LEN];
};

/* One DAMON region at the end of an aggregation interval, from damon.bpf.c
 * through a ring buffer. target_id is the index of the target in its DAMON
 * context (targets/<id>), not a pid: the agent maps it back. */
struct kvt_damon_region {
  __u64 time_ns;
  __u64 start;
  __u64 end;
  __u32 target_id;
  __u32 nr_regions;
  __u32 nr_accesses;
  __u32 age;
  __u32 kdamond_pid;
  __u32 pad;
};

/* Why the kernel migrated pages, in kvtier's own numbering (the kernel's enum
 * migrate_reason changes between versions; migrate.bpf.c maps it with CO-RE). */
enum kvt_migrate_reason {
  KVT_MR_COMPACTION = 0,
  KVT_MR_MEMORY_FAILURE = 1,
  KVT_MR_MEMORY_HOTPLUG = 2,
  KVT_MR_SYSCALL = 3, /* move_pages(2), migrate_pages(2) */
  KVT_MR_MEMPOLICY_MBIND = 4,
  KVT_MR_NUMA_MISPLACED = 5, /* NUMA balancing promotion */
  KVT_MR_CONTIG_RANGE = 6,
  KVT_MR_LONGTERM_PIN = 7,
  KVT_MR_DEMOTION = 8, /* reclaim demotion to a lower tier */
  KVT_MR_DAMON = 9,    /* DAMOS migrate_hot / migrate_cold */
  KVT_MR_OTHER = 10,
  KVT_MR_NR = 11,
};

/* Per-CPU counters per reason, from the migrate:mm_migrate_pages tracepoint. */
struct kvt_migrate_counters {
  __u64 calls;
  __u64 succeeded;
  __u64 failed;
  __u64 thp_succeeded;
  __u64 thp_failed;
  __u64 thp_split;
};

#endif /* KVTIER_ABI_H */
