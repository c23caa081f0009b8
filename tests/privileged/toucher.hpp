#pragma once
// A child process that touches a known set of pages on command, for the
// sampler tests: the parent maps the buffer (untouched) before fork, so the
// addresses are known and the child's first write to each page is one fault.

#include <sys/mman.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <set>

namespace kvtier::testing {

class Toucher {
 public:
  // `pages` pages of which every `stride`-th one is touched.
  Toucher(std::size_t pages, std::size_t stride) : pages_(pages), stride_(stride) {
    bytes_ = pages_ * 4096;
    buf_ = static_cast<char*>(
        mmap(nullptr, bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    // One fault per 4 KiB page: a THP would take one fault for 2 MiB.
    if (buf_ != MAP_FAILED) madvise(buf_, bytes_, MADV_NOHUGEPAGE);
    warm_ = static_cast<char*>(
        mmap(nullptr, 4096 * 4, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    if (pipe(to_child_) != 0 || pipe(to_parent_) != 0) return;
    pid_ = fork();
    if (pid_ == 0) child();
    close(to_child_[0]);
    close(to_parent_[1]);
    char c = 0;
    ready_ = read(to_parent_[0], &c, 1) == 1;  // the child has warmed up
  }
  ~Toucher() {
    finish();
    munmap(buf_, bytes_);
    munmap(warm_, 4096 * 4);
  }
  Toucher(const Toucher&) = delete;
  Toucher& operator=(const Toucher&) = delete;

  [[nodiscard]] bool ready() const { return ready_ && pid_ > 0 && buf_ != MAP_FAILED; }
  [[nodiscard]] pid_t pid() const { return pid_; }
  [[nodiscard]] std::uint64_t begin() const { return reinterpret_cast<std::uint64_t>(buf_); }
  [[nodiscard]] std::uint64_t end() const { return begin() + bytes_; }

  std::set<std::uint64_t> touched_pages() const {
    std::set<std::uint64_t> s;
    for (std::size_t i = 0; i < pages_; i += stride_) s.insert(begin() + i * 4096);
    return s;
  }

  // Tells the child to touch its pages; returns when it has.
  bool touch() {
    const char go = 't';
    char c = 0;
    return write(to_child_[1], &go, 1) == 1 && read(to_parent_[0], &c, 1) == 1;
  }
  // Lets the child exit and reaps it.
  void finish() {
    if (pid_ <= 0) return;
    const char bye = 'x';
    (void)!write(to_child_[1], &bye, 1);
    int status = 0;
    waitpid(pid_, &status, 0);
    pid_ = -1;
    close(to_child_[1]);
    close(to_parent_[0]);
  }

 private:
  [[noreturn]] void child() {
    close(to_child_[1]);
    close(to_parent_[0]);
    // Run the touch loop once on a scratch buffer so its code, stack and the
    // pipe calls have faulted in before the parent starts watching.
    touch_range(warm_, 4, 1);
    char c = 'r';
    (void)!write(to_parent_[1], &c, 1);
    while (read(to_child_[0], &c, 1) == 1 && c == 't') {
      touch_range(buf_, pages_, stride_);
      (void)!write(to_parent_[1], &c, 1);
    }
    _exit(0);
  }
  // Not instrumented: under AddressSanitizer each store would first read its
  // shadow byte, and those page faults (in the shadow, far from the buffer)
  // would be sampled too.
  __attribute__((no_sanitize("address"))) static void touch_range(char* p, std::size_t pages,
                                                                  std::size_t stride) {
    for (std::size_t i = 0; i < pages; i += stride) {
      *static_cast<volatile char*>(p + i * 4096) = 1;
    }
  }

  std::size_t pages_;
  std::size_t stride_;
  std::size_t bytes_ = 0;
  char* buf_ = nullptr;
  char* warm_ = nullptr;
  int to_child_[2] = {-1, -1};
  int to_parent_[2] = {-1, -1};
  pid_t pid_ = -1;
  bool ready_ = false;
};

}  // namespace kvtier::testing
