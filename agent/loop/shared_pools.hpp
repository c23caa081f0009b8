#pragma once
// KV pools in shared memory (a memfd or a /dev/shm file that several worker
// processes map; agent/host/procfs.hpp's is_shared_pool) and which target
// tiers each (docs/sources.md, "Shared pools"). A pool is one file, named by
// its device and inode in /proc/PID/maps, whoever maps it and wherever. It has
// one owner: one mapping of one target, whose heat table tracks the pool and
// whose pid the pool's pages are read and moved through (move_pages with
// MPOL_MF_MOVE_ALL moves a page every sharer maps). Every other mapping of the
// pool by a target is borrowed: what the sources see there is evidence for the
// owner's pages at the same file offset (to_owners), so the pool's heat is
// the sum of every sharer's accesses.

#include <compare>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "agent/host/move_pages_call.hpp"
#include "agent/host/procfs.hpp"
#include "policy/types.hpp"

namespace kvtier::agent {

// A pool's file: device and inode, as /proc/PID/maps gives them.
struct PoolKey {
  std::uint32_t dev_major = 0;
  std::uint32_t dev_minor = 0;
  std::uint64_t inode = 0;
  friend auto operator<=>(const PoolKey&, const PoolKey&) = default;
};

// One mapping of a pool: `range` maps the file from byte `offset`.
struct PoolMapping {
  Pid pid = 0;
  AddrRange range;
  std::uint64_t offset = 0;
  friend bool operator==(const PoolMapping&, const PoolMapping&) = default;
};

struct SharedPool {
  std::string path;  // as the owner's maps names it ("/memfd:kv (deleted)")
  PoolMapping owner;
  std::vector<PoolMapping> borrowed;  // every other target mapping, by pid and address
};

class SharedPools {
 public:
  // Every target's mappings (/proc/PID/maps), as read this step. A pool keeps
  // its owner while that mapping lasts; else the lowest pid's lowest mapping
  // owns it. Mappings under `min_bytes` are no pools. Logs each pool that
  // appears, changes owner or sharers, or goes (one line each).
  void update(const std::map<Pid, std::vector<MapEntry>>& maps, std::uint64_t min_bytes);
  // Whether `range` of `pid` is a pool's owner mapping (tracked in its heat).
  [[nodiscard]] bool owns(Pid pid, AddrRange range) const;
  // The pool mappings of `pid` whose pages another mapping tracks (sorted):
  // sources watch them, the heat goes to the owner.
  [[nodiscard]] std::vector<AddrRange> borrowed(Pid pid) const;
  // Samples in a borrowed mapping become the owner's (pid and address at the
  // same file offset); a region there adds the owner's part of it. Samples
  // the owner's mapping does not cover, and everything else, stay as they are.
  void to_owners(std::vector<AccessSample>& samples, std::vector<RegionAccess>& regions) const;
  // The same byte of a pool in its borrowed mappings, when `addr` of `pid` lies
  // in the pool's owner mapping (empty otherwise).
  [[nodiscard]] std::vector<std::pair<Pid, std::uint64_t>> in_borrowed(Pid pid,
                                                                       std::uint64_t addr) const;
  [[nodiscard]] const std::map<PoolKey, SharedPool>& all() const { return pools_; }

 private:
  struct Borrowed {
    AddrRange range;
    std::uint64_t offset = 0;
    PoolMapping owner;
  };
  struct OwnerAddr {
    Pid pid = 0;
    std::uint64_t addr = 0;
  };
  [[nodiscard]] std::optional<OwnerAddr> owner_addr(Pid pid, std::uint64_t addr) const;
  void index();

  std::map<PoolKey, SharedPool> pools_;
  std::map<Pid, std::vector<Borrowed>> by_pid_;  // sorted by address
};

// move_pages(2) for a pool's owner, whose page tables hold only the pages it
// touched: each page of an owner mapping that the call finds not present
// (-ENOENT) is looked for (or moved) again through the pool's borrowed
// mappings at the same file offset, and takes the first status that names a
// node. Everything else is `inner`'s call as it is. `pools` is read at each
// call (the loop's thread updates it between calls).
MovePagesFn through_sharers(MovePagesFn inner, std::shared_ptr<const SharedPools> pools);

}  // namespace kvtier::agent
