// SPDX-License-Identifier: GPL-2.0
/* Fault sampler: every user page fault of a target process (first touch,
 * copy-on-write, and NUMA hint faults when NUMA balancing scans) counted per
 * (tgid, page). A raw tracepoint, so no tracefs mount is needed; its
 * arguments (address, regs, error_code) are the same on 6.12 and 6.18. */
#include "page_heat.bpf.h"

/* x86 page-fault error code bits (arch/x86/include/asm/trap_pf.h). */
#define KVT_PF_PROT (1UL << 0)

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
  kvt_record(tgid, addr, 1, flags);
  return 0;
}

char LICENSE[] SEC("license") = "GPL";
