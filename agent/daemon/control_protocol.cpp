#include "agent/daemon/control_protocol.hpp"

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

#include <fmt/format.h>

#include "policy/error.hpp"

namespace kvtier::agent {

using nlohmann::json;

std::string encode_request(const ControlRequest& req) {
  json j{{"command", req.command}, {"args", req.args}};
  return j.dump() + '\n';
}

Result<ControlRequest> parse_request(std::string_view line) {
  json j = json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return fail("request is not valid JSON");
  if (!j.is_object()) return fail("request must be a JSON object");
  auto cmd = j.find("command");
  if (cmd == j.end() || !cmd->is_string()) return fail("request has no string \"command\"");
  ControlRequest req{.command = cmd->get<std::string>()};
  if (auto args = j.find("args"); args != j.end() && !args->is_null()) {
    if (!args->is_object()) return fail("request \"args\" must be an object");
    req.args = *args;
  }
  return req;
}

std::string encode_ok(const json& result) {
  json j{{"ok", true}, {"result", result}};
  // Replace invalid UTF-8 (process names, paths) rather than throw mid-response.
  return j.dump(-1, ' ', false, json::error_handler_t::replace) + '\n';
}

std::string encode_error(std::string_view message) {
  json j{{"ok", false}, {"error", std::string(message)}};
  return j.dump(-1, ' ', false, json::error_handler_t::replace) + '\n';
}

Result<json> parse_response(std::string_view line) {
  json j = json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return fail(
        fmt::format("malformed response from kvtierd ({} bytes, not a JSON object)", line.size()));
  }
  auto ok = j.find("ok");
  if (ok == j.end() || !ok->is_boolean())
    return fail("malformed response from kvtierd (no \"ok\")");
  if (!ok->get<bool>()) {
    auto err = j.find("error");
    return fail(err != j.end() && err->is_string() ? err->get<std::string>()
                                                   : std::string("kvtierd reported an error"));
  }
  auto res = j.find("result");
  return res == j.end() ? json(nullptr) : *res;
}

bool LineReader::append(std::string_view bytes) {
  if (overflowed_) return false;
  // Compact lazily so a stream of small lines does not copy the buffer each time.
  if (pos_ > 0 && pos_ >= buf_.size() / 2) {
    buf_.erase(0, pos_);
    tail_ -= pos_;
    pos_ = 0;
  }
  // Scan only the new bytes: a large response arrives in many reads.
  std::size_t from = buf_.size();
  buf_.append(bytes);
  while (true) {
    const auto nl = buf_.find('\n', from);
    if (nl == std::string::npos) break;
    if (nl - tail_ > max_line_) overflowed_ = true;
    tail_ = nl + 1;
    from = nl + 1;
  }
  if (buf_.size() - tail_ > max_line_) overflowed_ = true;
  return !overflowed_;
}

std::optional<std::string> LineReader::next_line() {
  if (overflowed_) return std::nullopt;
  const auto nl = buf_.find('\n', pos_);
  if (nl == std::string::npos) return std::nullopt;
  std::string line = buf_.substr(pos_, nl - pos_);
  pos_ = nl + 1;
  if (!line.empty() && line.back() == '\r') line.pop_back();
  return line;
}

}  // namespace kvtier::agent
