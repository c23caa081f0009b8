#pragma once
// A scripted stand-in for move_pages(2) that follows the kernel's batch rules
// (mm/migrate.c do_pages_move): pages are queued until one needs its status
// stored right away (absent, already there, busy), then the queue is migrated;
// if any queued page fails, the call stops, returns the number of pages not
// moved plus those never reached, and leaves the queue's statuses unwritten.

#include <cerrno>
#include <cstdint>
#include <map>
#include <set>
#include <span>
#include <vector>

#include "agent/host/move_pages_call.hpp"

namespace kvtier::agent::testing {

struct FakeKernel {
  std::map<std::uint64_t, int> node_of;     // present pages (by move-unit address)
  std::map<std::uint64_t, int> pages_of;    // pages per unit (huge units: 512)
  std::set<std::uint64_t> pinned;           // migration always fails
  std::map<std::uint64_t, int> busy_calls;  // isolation fails this many more calls
  std::set<std::uint64_t> shared;           // mapcount > 1: -EACCES without MOVE_ALL
  std::map<int, std::int64_t> free_pages;   // per node; absent = unlimited
  int gone_after_calls = -1;                // ESRCH from this call on
  int errno_always = 0;                     // every call fails with this
  int calls = 0;
  int move_calls = 0;
  std::vector<std::size_t> move_sizes;

  MovePagesResult operator()(Pid /*pid*/, std::span<void*> pages, const int* nodes,
                             std::span<int> status, int flags) {
    ++calls;
    if (gone_after_calls >= 0 && calls > gone_after_calls) return {-1, ESRCH};
    if (errno_always != 0) return {-1, errno_always};
    if (nodes == nullptr) {
      for (std::size_t i = 0; i < pages.size(); ++i) {
        auto it = node_of.find(addr(pages[i]));
        status[i] = it == node_of.end() ? -ENOENT : it->second;
      }
      return {0, 0};
    }
    ++move_calls;
    move_sizes.push_back(pages.size());
    std::vector<std::size_t> queue;
    int target = nodes[0];
    const auto flush = [&](std::size_t i) -> long {
      long failed = 0;
      for (const auto q : queue) {
        const auto a = addr(pages[q]);
        if (pinned.contains(a)) {
          ++failed;
          continue;
        }
        auto fp = free_pages.find(target);
        if (fp != free_pages.end()) {
          if (fp->second < units(a)) return -ENOMEM;
          fp->second -= units(a);
        }
        node_of[a] = target;
      }
      if (failed > 0) return failed + static_cast<long>(pages.size() - i);
      for (const auto q : queue) status[q] = target;
      queue.clear();
      return 0;
    };
    for (std::size_t i = 0; i < pages.size(); ++i) {
      target = nodes[i];
      const auto a = addr(pages[i]);
      int store = 1;  // 1: queued
      auto it = node_of.find(a);
      if (it == node_of.end()) {
        store = -EFAULT;
      } else if (it->second == target) {
        store = target;
      } else if (shared.contains(a) && (flags & 4) == 0) {
        store = -EACCES;
      } else if (auto b = busy_calls.find(a); b != busy_calls.end() && b->second > 0) {
        --b->second;
        store = -EBUSY;
      }
      if (store == 1) {
        queue.push_back(i);
        continue;
      }
      status[i] = store;
      const long r = flush(i);
      if (r == -ENOMEM) return {-1, ENOMEM};
      if (r > 0) return {r - 1, 0};  // page i has its status
    }
    const long r = flush(pages.size());
    if (r == -ENOMEM) return {-1, ENOMEM};
    return {r, 0};
  }

  // The mover keeps a copy of its MovePagesFn: hand it a reference to this.
  MovePagesFn fn() {
    return [this](Pid pid, std::span<void*> p, const int* n, std::span<int> s, int f) {
      return (*this)(pid, p, n, s, f);
    };
  }

  static std::uint64_t addr(void* p) { return reinterpret_cast<std::uint64_t>(p); }
  [[nodiscard]] std::int64_t units(std::uint64_t a) const {
    auto it = pages_of.find(a);
    return it == pages_of.end() ? 1 : it->second;
  }
  void map(std::uint64_t start, std::uint64_t pages, int node) {
    for (std::uint64_t i = 0; i < pages; ++i) node_of[start + i * 4096] = node;
  }
};

}  // namespace kvtier::agent::testing
