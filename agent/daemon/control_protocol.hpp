#pragma once
// The control socket's wire format, shared by kvtierd and kvtierctl: one JSON
// object per line in each direction.
//   request:  {"command": "status", "args": {...}}
//   response: {"ok": true, "result": {...}}  or  {"ok": false, "error": "one line"}
// Lines are bounded so a client cannot make the daemon buffer without limit.

#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "policy/error.hpp"

namespace kvtier::agent {

inline constexpr std::size_t kMaxRequestBytes = std::size_t{64} << 10;
// Responses may carry a full dump; the client accepts up to this much per line.
inline constexpr std::size_t kMaxResponseBytes = std::size_t{64} << 20;

struct ControlRequest {
  std::string command;
  nlohmann::json args = nlohmann::json::object();
};

// Newline-terminated request line.
std::string encode_request(const ControlRequest& req);
// Rejects anything that is not an object with a string "command" and, if
// present, an object "args"; the error says which.
Result<ControlRequest> parse_request(std::string_view line);

// An integer argument of a request, range-checked before any narrowing (so
// 4294967297 is refused, not taken as pid 1). Missing: `fallback`, or an error
// when there is none. Any other type or value: an error naming the argument
// and the range.
Result<std::int64_t> integer_arg(const nlohmann::json& args, std::string_view name,
                                 std::optional<std::int64_t> fallback, std::int64_t lo,
                                 std::int64_t hi);

std::string encode_ok(const nlohmann::json& result);
std::string encode_error(std::string_view message);
// The result of an ok response; an error response becomes an Error carrying the
// daemon's message; a malformed line is an error saying so.
Result<nlohmann::json> parse_response(std::string_view line);

// Splits a byte stream into lines. A line longer than the limit poisons the
// reader: the connection it came from is dropped, since resynchronising on a
// stream of unknown framing is guesswork.
class LineReader {
 public:
  explicit LineReader(std::size_t max_line) : max_line_(max_line) {}

  // False once the pending (unterminated) data exceeds the limit.
  bool append(std::string_view bytes);
  // The next complete line without its '\n', if any.
  std::optional<std::string> next_line();
  [[nodiscard]] bool has_line() const {
    return !overflowed_ && buf_.find('\n', pos_) != std::string::npos;
  }
  [[nodiscard]] bool overflowed() const { return overflowed_; }
  [[nodiscard]] std::size_t pending() const { return buf_.size() - pos_; }

 private:
  std::size_t max_line_;
  std::string buf_;
  std::size_t pos_ = 0;   // start of the first unread line
  std::size_t tail_ = 0;  // start of the unterminated tail
  bool overflowed_ = false;
};

}  // namespace kvtier::agent
