// SPDX-License-Identifier: GPL-2.0
/* PMU sampler: runs on every sample of a perf event that records the data
 * address (PEBS mem-loads, IBS op, or the software page-faults event) and
 * counts samples per (tgid, page) for target processes only. */
#include "page_heat.bpf.h"

SEC("perf_event")
int kvt_pmu_sample(struct bpf_perf_event_data* ctx) {
  __u32 tgid = kvt_current_target();
  if (!tgid) return 0;
  __u64 addr = ctx->addr;
  /* Kernel addresses (top bit set on x86-64) are not the process's pages. */
  if (!addr || (addr >> 63)) {
    kvt_count(KVT_STAT_NO_ADDR);
    return 0;
  }
  /* One sample every sample_period events stands for that many accesses. */
  __u64 period = ctx->sample_period ? ctx->sample_period : 1;
  kvt_record(tgid, addr, period, 0);
  return 0;
}

char LICENSE[] SEC("license") = "GPL";
