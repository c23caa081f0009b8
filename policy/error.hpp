#pragma once
// One error style for every layer below main(): a value, never an exception.

#include <expected>
#include <string>
#include <system_error>
#include <utility>

namespace kvtier {

struct Error {
  // One line a person can act on: what failed, where (file, key or errno) and what to do.
  std::string message;
  // errno when the error came from a system call, else 0.
  int code = 0;
};

template <class T>
using Result = std::expected<T, Error>;

inline std::unexpected<Error> fail(std::string message, int code = 0) {
  return std::unexpected<Error>(Error{.message = std::move(message), .code = code});
}

// strerror() without its thread-safety problem.
inline std::string errno_text(int err) {
  return std::generic_category().message(err);
}

}  // namespace kvtier
