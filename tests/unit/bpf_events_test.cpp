#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "agent/sources/bpf_events.hpp"
#include "agent/sources/migration_counter.hpp"
#include "bpf/kvtier_abi.h"

namespace kvtier {
namespace {

template <class T>
std::vector<std::byte> bytes_of(const T& v) {
  std::vector<std::byte> b(sizeof(v));
  std::memcpy(b.data(), &v, sizeof(v));
  return b;
}

TEST(BpfEvents, AbiLayoutIsFixed) {
  // The BPF side compiles the same header; these catch an accidental change.
  EXPECT_EQ(sizeof(kvt_page_key), 16U);
  EXPECT_EQ(sizeof(kvt_page_val), 40U);
  EXPECT_EQ(sizeof(kvt_proc_event), 40U);
  EXPECT_EQ(sizeof(kvt_damon_region), 48U);
  EXPECT_EQ(sizeof(kvt_migrate_counters), 48U);
}

TEST(BpfEvents, DecodesProcessEvents) {
  kvt_proc_event e{.time_ns = 99, .kind = KVT_PROC_EXIT, .pid = 10, .ppid = 1, .exit_code = 256};
  std::memcpy(e.comm, "vllm-worker-0123", KVT_COMM_LEN);  // full length, no NUL
  auto ev = agent::decode_proc_event(bytes_of(e));
  ASSERT_TRUE(ev) << ev.error().message;
  EXPECT_EQ(ev->kind, agent::ProcEventKind::kExit);
  EXPECT_EQ(ev->pid, 10);
  EXPECT_EQ(ev->ppid, 1);
  EXPECT_EQ(ev->time, 99U);
  EXPECT_EQ(ev->exit_code, 256U);
  EXPECT_EQ(ev->comm, "vllm-worker-0123");
  std::strcpy(e.comm, "python3");
  e.kind = KVT_PROC_EXEC;
  ev = agent::decode_proc_event(bytes_of(e));
  ASSERT_TRUE(ev);
  EXPECT_EQ(ev->kind, agent::ProcEventKind::kExec);
  EXPECT_EQ(ev->comm, "python3");
}

TEST(BpfEvents, RejectsShortAndUnknownProcessEvents) {
  kvt_proc_event e{.kind = 7};
  auto bad = agent::decode_proc_event(bytes_of(e));
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().message.find("unknown kind 7"), std::string::npos);
  auto b = bytes_of(e);
  b.resize(12);
  auto shortev = agent::decode_proc_event(b);
  ASSERT_FALSE(shortev);
  EXPECT_NE(shortev.error().message.find("12 bytes"), std::string::npos);
}

TEST(BpfEvents, DecodesDamonRegions) {
  const kvt_damon_region r{.time_ns = 5,
                           .start = 0x7f0000000000,
                           .end = 0x7f0000800000,
                           .target_id = 1,
                           .nr_regions = 12,
                           .nr_accesses = 17,
                           .age = 3,
                           .kdamond_pid = 321};
  auto ev = agent::decode_damon_region(bytes_of(r), 20);
  ASSERT_TRUE(ev) << ev.error().message;
  EXPECT_EQ(ev->target_index, 1U);
  EXPECT_EQ(ev->nr_regions, 12U);
  EXPECT_EQ(ev->kdamond_pid, 321);
  EXPECT_EQ(ev->access.range.bytes(), 8U << 20);
  EXPECT_EQ(ev->access.nr_accesses, 17U);
  EXPECT_EQ(ev->access.max_nr_accesses, 20U);
  EXPECT_EQ(ev->access.age, 3U);
  EXPECT_EQ(ev->access.time, 5U);
  EXPECT_EQ(ev->access.source, SourceKind::kDamon);
  kvt_damon_region empty = r;
  empty.end = empty.start;
  EXPECT_FALSE(agent::decode_damon_region(bytes_of(empty), 20));
  auto b = bytes_of(r);
  b.pop_back();
  EXPECT_FALSE(agent::decode_damon_region(b, 20));
}

TEST(BpfEvents, MigrateReasonNames) {
  EXPECT_EQ(agent::migrate_reason_name(KVT_MR_DEMOTION), "demotion");
  EXPECT_EQ(agent::migrate_reason_name(KVT_MR_NUMA_MISPLACED), "numa_misplaced");
  EXPECT_EQ(agent::migrate_reason_name(KVT_MR_DAMON), "damon");
  EXPECT_EQ(agent::migrate_reason_name(KVT_MR_NR), "?");
}

}  // namespace
}  // namespace kvtier
