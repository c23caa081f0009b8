#pragma once
// The load generator's side of llama-server's HTTP API: plain HTTP/1.1 over a loopback TCP
// socket, one connection per request (Connection: close), JSON bodies. The builders and
// parsers are pure (unit-tested); http_exchange does the I/O.

#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>

#include "policy/error.hpp"

namespace kvtier::bench::loadgen {

struct CompletionRequest {
  std::string prompt;
  std::uint32_t n_predict = 16;
  double temperature = 0;
  int seed = 38;
  int id_slot = -1;  // -1: the server chooses (by prefix similarity, then least recently used)
};

// The /completion body: cache_prompt on (the server reuses what a slot holds of the prompt),
// token ids returned.
std::string completion_body(const CompletionRequest& request);
// The whole HTTP/1.1 request, with Host, Content-Length and Connection: close.
std::string http_request(std::string_view method, std::string_view path, std::string_view host,
                         std::string_view body);

struct HttpResponse {
  int status = 0;
  std::map<std::string, std::string> headers;  // names in lower case
  std::string body;                            // de-chunked
};
// A complete response as read up to the connection's close: status line, headers, a body by
// Content-Length, chunked, or to the end. An error names what is malformed.
Result<HttpResponse> parse_http_response(std::string_view raw);

struct Completion {
  std::string content;
  std::string tokens;  // the token ids, comma-separated
  int id_slot = -1;
  std::int64_t tokens_cached = -1;  // the slot's cells after the request
  std::int64_t cache_n = -1;        // prompt tokens reused from the slot
  std::int64_t prompt_n = -1;       // prompt tokens computed
  double prompt_ms = 0;
  std::int64_t predicted_n = -1;
  double predicted_ms = 0;
  double predicted_per_second = 0;
};
// A /completion response body; an error names the missing field or the server's own error.
Result<Completion> parse_completion(std::string_view body);

// Prometheus text (llama-server's /metrics): every sample line, name (with labels) -> value.
std::map<std::string, double> parse_metrics(std::string_view text);

// Connects to 127.0.0.1:port, sends `request`, reads to the close. Error::code is the errno;
// ETIMEDOUT when `timeout` passed with no byte (or the connection not made).
Result<std::string> http_exchange(std::uint16_t port, const std::string& request,
                                  std::chrono::milliseconds timeout);

}  // namespace kvtier::bench::loadgen
