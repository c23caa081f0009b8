#include <gtest/gtest.h>

#include "agent/sources/damon_source.hpp"
#include "agent/sources/perf_events.hpp"
#include "agent/sources/probes.hpp"
#include "fixture.hpp"

namespace kvtier {
namespace {

using agent::probe_bpf_kernel_reads;
using agent::probe_btf;
using agent::probe_damon_vaddr;
using agent::probe_page_idle;
using agent::probe_tracepoint;
using testing::dir;
using testing::Fixture;

TEST(SourceProbes, NoBtfSaysSo) {
  Fixture t({dir("proc"), dir("sys")});
  const auto a = probe_btf(t.paths());
  EXPECT_FALSE(a.ok);
  EXPECT_NE(a.why.find("no BTF"), std::string::npos) << a.why;
  EXPECT_NE(a.why.find("kernel/btf/vmlinux"), std::string::npos) << a.why;
  EXPECT_TRUE(a.kernel_refuses) << "status reports it, not only the start-up line";
  t.write("sys/kernel/btf/vmlinux", "x");
  EXPECT_TRUE(probe_btf(t.paths()).ok);
}

// Issue 37: lockdown=confidentiality bars bpf_probe_read_kernel (the damon
// source's, the migration counter's and the process watcher's programs use it);
// integrity (and no lockdown LSM at all) leaves them be.
TEST(SourceProbes, LockdownConfidentialityBarsBpfKernelReads) {
  Fixture t({dir("proc"), dir("sys")});
  EXPECT_TRUE(probe_bpf_kernel_reads(t.paths(), "the damon source").ok) << "no lockdown file";
  t.write("sys/kernel/security/lockdown", "none [integrity] confidentiality\n");
  EXPECT_TRUE(probe_bpf_kernel_reads(t.paths(), "the damon source").ok);
  t.write("sys/kernel/security/lockdown", "none integrity [confidentiality]\n");
  const auto a = probe_bpf_kernel_reads(t.paths(), "the damon source");
  EXPECT_FALSE(a.ok);
  EXPECT_TRUE(a.kernel_refuses);
  EXPECT_FALSE(a.missing_capability);
  EXPECT_NE(a.why.find("kernel lockdown is confidentiality"), std::string::npos) << a.why;
  EXPECT_NE(a.why.find("kernel/security/lockdown"), std::string::npos) << a.why;
  EXPECT_NE(a.why.find("the damon source"), std::string::npos) << a.why;
}

// Issue 37: every kdamond on (another DAMON user holds the sysfs tree): the
// damon source is refused by the kernel, which status reports.
TEST(SourceProbes, DamonBusyIsAKernelRefusal) {
  if (!agent::probe_bpf_privileges().ok) {
    GTEST_SKIP() << "the damon source's probe asks for CAP_BPF before DAMON: run as root";
  }
  Fixture t({dir("proc"), dir("sys")});
  t.copy("sources/damon-vaddr");
  t.write("sys/kernel/btf/vmlinux", "x");
  t.mkdir("sys/kernel/tracing/events/damon/damon_aggregated");
  const agent::DamonSource src(t.paths(), agent::DamonOptions{});
  EXPECT_TRUE(src.probe().ok) << src.probe().why;
  t.write("sys/kernel/mm/damon/admin/kdamonds/0/state", "on\n");
  const auto a = src.probe();
  EXPECT_FALSE(a.ok);
  EXPECT_TRUE(a.kernel_refuses);
  EXPECT_EQ(a.why, "DAMON busy: all 1 kdamonds are on (another DAMON user)");
  t.write("sys/kernel/mm/damon/admin/kdamonds/0/state", "off\n");
  t.write("sys/kernel/security/lockdown", "none integrity [confidentiality]\n");
  EXPECT_TRUE(src.probe().kernel_refuses) << src.probe().why;
}

TEST(SourceProbes, TracepointFoundInMountedTracefs) {
  Fixture t({dir("proc"), dir("sys")});
  t.mkdir("sys/kernel/tracing/events/exceptions/page_fault_user");
  EXPECT_TRUE(probe_tracepoint(t.paths(), "exceptions", "page_fault_user").ok);
  const auto a = probe_tracepoint(t.paths(), "damon", "damon_aggregated");
  EXPECT_FALSE(a.ok);
  EXPECT_NE(a.why.find("damon:damon_aggregated missing"), std::string::npos) << a.why;
}

TEST(SourceProbes, TracepointWithoutTracefsOrBtfIsUnknown) {
  Fixture t({dir("proc"), dir("sys")});
  const auto a = probe_tracepoint(t.paths(), "migrate", "mm_migrate_pages");
  EXPECT_FALSE(a.ok);
  EXPECT_NE(a.why.find("tracefs not mounted"), std::string::npos) << a.why;
  EXPECT_NE(a.why.find("no BTF"), std::string::npos) << a.why;
}

TEST(SourceProbes, DamonWithoutSysfs) {
  Fixture t({dir("proc"), dir("sys")});
  const auto a = probe_damon_vaddr(t.paths());
  EXPECT_FALSE(a.ok);
  EXPECT_NE(a.why.find("no DAMON sysfs"), std::string::npos) << a.why;
}

TEST(SourceProbes, DamonWithVaddr) {
  Fixture t({dir("proc"), dir("sys")});
  t.copy("sources/damon-vaddr");
  const auto a = probe_damon_vaddr(t.paths());
  EXPECT_TRUE(a.ok) << a.why;
}

TEST(SourceProbes, DamonWithPaddrOnly) {
  Fixture t({dir("proc"), dir("sys")});
  t.copy("sources/damon-vaddr");
  t.write("sys/kernel/mm/damon/admin/kdamonds/0/contexts/0/avail_operations", "paddr\n");
  const auto a = probe_damon_vaddr(t.paths());
  EXPECT_FALSE(a.ok);
  EXPECT_NE(a.why.find("no DAMON vaddr"), std::string::npos) << a.why;
  EXPECT_NE(a.why.find("'paddr'"), std::string::npos) << a.why;
}

TEST(SourceProbes, DamonWithoutContextAsksKallsyms) {
  Fixture t({dir("proc"), dir("sys")});
  t.write("sys/kernel/mm/damon/admin/kdamonds/nr_kdamonds", "0\n");
  t.write("proc/kallsyms", "ffffffff81000000 T _stext\n");
  EXPECT_FALSE(probe_damon_vaddr(t.paths()).ok);
  t.write("proc/kallsyms", "ffffffff81000000 T _stext\nffffffff81234560 t damon_va_init\n");
  EXPECT_TRUE(probe_damon_vaddr(t.paths()).ok);
}

TEST(SourceProbes, PageIdle) {
  Fixture t({dir("proc"), dir("sys")});
  const auto a = probe_page_idle(t.paths());
  EXPECT_FALSE(a.ok);
  EXPECT_NE(a.why.find("CONFIG_IDLE_PAGE_TRACKING"), std::string::npos) << a.why;
  t.write("sys/kernel/mm/page_idle/bitmap", "");
  EXPECT_TRUE(probe_page_idle(t.paths()).ok);
}

TEST(PmuEvents, EncodesPebsLoadLatencyFromSysfs) {
  Fixture t({dir("proc"), dir("sys")});
  t.copy("sources/intel");
  auto spec = agent::encode_pmu_event(t.paths(), "cpu", "event=0xcd,umask=0x1,ldlat=3", "ldlat=30");
  ASSERT_TRUE(spec) << spec.error().message;
  EXPECT_EQ(spec->type, 4U);
  EXPECT_EQ(spec->config, 0x1cdU);
  EXPECT_EQ(spec->config1, 30U);
}

TEST(PmuEvents, SplitBitRanges) {
  Fixture t({dir("proc"), dir("sys")});
  t.copy("sources/intel");
  t.write("sys/bus/event_source/devices/cpu/format/event", "config:0-7,32-35");
  auto spec = agent::encode_pmu_event(t.paths(), "cpu", "event=0x1cd", "");
  ASSERT_TRUE(spec) << spec.error().message;
  EXPECT_EQ(spec->config, 0xcdULL | (0x1ULL << 32));
}

TEST(PmuEvents, UnknownTermIsAnErrorNamingTheFile) {
  Fixture t({dir("proc"), dir("sys")});
  t.copy("sources/intel");
  auto spec = agent::encode_pmu_event(t.paths(), "cpu", "event=0xcd,frob=1", "");
  ASSERT_FALSE(spec);
  EXPECT_NE(spec.error().message.find("format/frob"), std::string::npos) << spec.error().message;
  auto bad = agent::encode_pmu_event(t.paths(), "cpu", "event=zz", "");
  ASSERT_FALSE(bad);
}

TEST(PmuEvents, CandidatesInPreferenceOrder) {
  Fixture t({dir("proc"), dir("sys")});
  t.copy("sources/intel");
  auto c = agent::hardware_event_candidates(t.paths(), 50);
  ASSERT_EQ(c.size(), 1U);
  EXPECT_EQ(c[0].kind, agent::PmuEventKind::kPebsLoadLatency);
  EXPECT_EQ(c[0].config1, 50U);
  EXPECT_EQ(c[0].name, "cpu/mem-loads,ldlat=50/P");
  t.write("sys/bus/event_source/devices/ibs_op/type", "11\n");
  c = agent::hardware_event_candidates(t.paths(), 50);
  ASSERT_EQ(c.size(), 2U);
  EXPECT_EQ(c[1].kind, agent::PmuEventKind::kIbsOp);
  EXPECT_EQ(c[1].type, 11U);
  Fixture empty({dir("proc"), dir("sys")});
  EXPECT_TRUE(agent::hardware_event_candidates(empty.paths(), 30).empty());
}

TEST(PmuEvents, OnlineCpus) {
  Fixture t({dir("proc"), dir("sys")});
  t.copy("sources/intel");
  auto cpus = agent::online_cpus(t.paths());
  ASSERT_TRUE(cpus);
  EXPECT_EQ(*cpus, (std::vector<int>{0, 1, 2, 3}));
}

}  // namespace
}  // namespace kvtier
