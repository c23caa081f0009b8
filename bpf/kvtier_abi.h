/* The ABI shared by the BPF programs and the agent: fixed-width structs only,
 * so the same header compiles for -target bpf and for user space. */
#ifndef KVTIER_ABI_H
#define KVTIER_ABI_H

#ifdef __bpf__
#include "vmlinux.h"
#else
#include <linux/types.h>
#endif

#endif /* KVTIER_ABI_H */
