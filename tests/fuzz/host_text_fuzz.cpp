// libFuzzer target: every parser of /proc and /sys text kvtier has, on the
// same bytes (a process controls its own cmdline, comm and maps; the rest is
// the kernel's, but a parser must not trust a format blindly either): cmdline,
// cgroup, maps, numa_maps, id lists, node meminfo and distance, the HMAT
// access files (one number), /proc/PID/stat, /proc/vmstat and /proc/zoneinfo. kvtier has no
// /proc/PID/status parser. Seeds: tests/fixtures/procfs, tests/fixtures/topology.

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "agent/host/procfs.hpp"
#include "agent/host/residency.hpp"
#include "agent/host/sysfs.hpp"
#include "agent/host/topology_reader.hpp"
#include "bench/probe/proc_text.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  using namespace kvtier::agent;
  (void)parse_cmdline(text);
  (void)parse_cgroup(text);
  if (auto maps = parse_maps(text, "maps")) {
    for (const auto& e : *maps) (void)is_movable_anon(e);
  }
  if (auto nm = parse_numa_maps(text, "numa_maps")) (void)numa_maps_bytes(*nm, {});
  (void)parse_id_list(text, "nodelist");
  (void)parse_meminfo_field(text, "MemTotal", "meminfo");
  (void)parse_distances(text, "distance");
  (void)parse_zone_reserves(text, 4096, "zoneinfo");
  (void)parse_u64(text, "read_latency");
  (void)kvtier::bench::parse_proc_stat(text);
  (void)kvtier::bench::parse_vmstat(text, {});
  return 0;
}
