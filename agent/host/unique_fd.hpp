#pragma once
// A file descriptor closed when its owner goes out of scope, for the readers
// that open several kernel files (pagemap, kpageflags, page_idle) in a row
// and may return early from any of them.

#include <unistd.h>

namespace kvtier::agent {

class UniqueFd {
 public:
  explicit UniqueFd(int fd) : fd_(fd) {}
  ~UniqueFd() {
    if (fd_ >= 0) ::close(fd_);
  }
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  [[nodiscard]] int get() const { return fd_; }

 private:
  int fd_;
};

}  // namespace kvtier::agent
