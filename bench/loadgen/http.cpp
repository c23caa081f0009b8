#include "bench/loadgen/http.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "policy/error.hpp"

namespace kvtier::bench::loadgen {
namespace {

std::string lower(std::string_view s) {
  std::string out(s);
  std::ranges::transform(out, out.begin(),
                         [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return out;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) {
    s.remove_prefix(1);
  }
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) {
    s.remove_suffix(1);
  }
  return s;
}

Result<std::string> dechunk(std::string_view body) {
  std::string out;
  while (true) {
    const auto eol = body.find("\r\n");
    if (eol == std::string_view::npos) {
      return fail("HTTP response: a chunk size line without CRLF");
    }
    std::size_t size = 0;
    const std::string_view hex = trim(body.substr(0, body.find_first_of(";\r")));
    if (std::from_chars(hex.data(), hex.data() + hex.size(), size, 16).ec != std::errc{}) {
      return fail("HTTP response: chunk size '" + std::string(hex) + "' is not hexadecimal");
    }
    body.remove_prefix(eol + 2);
    if (size == 0) {
      return out;
    }
    if (body.size() < size) {
      return fail("HTTP response: a chunk of " + std::to_string(size) + " B cut short");
    }
    out.append(body.substr(0, size));
    body.remove_prefix(std::min(body.size(), size + 2));
  }
}

template <class T>
T number_or(const nlohmann::json& j, const char* key, T fallback) {
  const auto it = j.find(key);
  return it != j.end() && it->is_number() ? it->get<T>() : fallback;
}

}  // namespace

std::string completion_body(const CompletionRequest& request) {
  const nlohmann::json j = {{"prompt", request.prompt},
                            {"n_predict", request.n_predict},
                            {"temperature", request.temperature},
                            {"seed", request.seed},
                            {"cache_prompt", true},
                            {"id_slot", request.id_slot},
                            {"return_tokens", true}};
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::string http_request(std::string_view method, std::string_view path, std::string_view host,
                         std::string_view body) {
  std::string r;
  r.append(method).append(" ").append(path).append(" HTTP/1.1\r\nHost: ").append(host);
  r.append("\r\nConnection: close\r\n");
  if (!body.empty()) {
    r.append("Content-Type: application/json\r\nContent-Length: ")
        .append(std::to_string(body.size()))
        .append("\r\n");
  }
  r.append("\r\n").append(body);
  return r;
}

Result<HttpResponse> parse_http_response(std::string_view raw) {
  const auto head_end = raw.find("\r\n\r\n");
  if (head_end == std::string_view::npos) {
    return fail("HTTP response: no end of headers in " + std::to_string(raw.size()) + " B");
  }
  std::string_view head = raw.substr(0, head_end);
  std::string_view rest = raw.substr(head_end + 4);
  const auto eol = head.find("\r\n");
  const std::string_view status_line = head.substr(0, eol);
  HttpResponse res;
  if (!status_line.starts_with("HTTP/1.") || status_line.size() < 12 ||
      std::from_chars(status_line.data() + 9, status_line.data() + 12, res.status).ec !=
          std::errc{}) {
    return fail("HTTP response: bad status line '" + std::string(status_line) + "'");
  }
  head.remove_prefix(eol == std::string_view::npos ? head.size() : eol + 2);
  while (!head.empty()) {
    const auto end = head.find("\r\n");
    const std::string_view line = head.substr(0, end);
    const auto colon = line.find(':');
    if (colon != std::string_view::npos) {
      res.headers[lower(trim(line.substr(0, colon)))] = std::string(trim(line.substr(colon + 1)));
    }
    head.remove_prefix(end == std::string_view::npos ? head.size() : end + 2);
  }
  if (lower(res.headers["transfer-encoding"]) == "chunked") {
    auto body = dechunk(rest);
    if (!body) {
      return std::unexpected(body.error());
    }
    res.body = std::move(*body);
    return res;
  }
  if (const auto it = res.headers.find("content-length"); it != res.headers.end()) {
    std::size_t n = 0;
    if (std::from_chars(it->second.data(), it->second.data() + it->second.size(), n).ec !=
            std::errc{} ||
        rest.size() < n) {
      return fail("HTTP response: Content-Length " + it->second + " but " +
                  std::to_string(rest.size()) + " B of body");
    }
    rest = rest.substr(0, n);
  }
  res.body = std::string(rest);
  return res;
}

Result<Completion> parse_completion(std::string_view body) {
  const nlohmann::json j = nlohmann::json::parse(body, nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    return fail("/completion: the response is not a JSON object");
  }
  if (const auto e = j.find("error"); e != j.end()) {
    return fail("/completion: the server's error: " + e->dump());
  }
  if (!j.contains("content") || !j["content"].is_string() || !j.contains("id_slot")) {
    return fail("/completion: no content or id_slot in the response");
  }
  Completion c;
  c.content = j["content"].get<std::string>();
  if (const auto t = j.find("tokens"); t != j.end() && t->is_array()) {
    for (const auto& id : *t) {
      c.tokens += (c.tokens.empty() ? "" : ",") + id.dump();
    }
  }
  c.id_slot = number_or<int>(j, "id_slot", -1);
  c.tokens_cached = number_or<std::int64_t>(j, "tokens_cached", -1);
  if (const auto t = j.find("timings"); t != j.end() && t->is_object()) {
    c.cache_n = number_or<std::int64_t>(*t, "cache_n", -1);
    c.prompt_n = number_or<std::int64_t>(*t, "prompt_n", -1);
    c.prompt_ms = number_or<double>(*t, "prompt_ms", 0);
    c.predicted_n = number_or<std::int64_t>(*t, "predicted_n", -1);
    c.predicted_ms = number_or<double>(*t, "predicted_ms", 0);
    c.predicted_per_second = number_or<double>(*t, "predicted_per_second", 0);
  }
  return c;
}

std::map<std::string, double> parse_metrics(std::string_view text) {
  std::map<std::string, double> out;
  while (!text.empty()) {
    const auto end = text.find('\n');
    const std::string_view line = trim(text.substr(0, end));
    text.remove_prefix(end == std::string_view::npos ? text.size() : end + 1);
    const auto space = line.rfind(' ');
    if (line.empty() || line.front() == '#' || space == std::string_view::npos) {
      continue;
    }
    const std::string value(line.substr(space + 1));
    char* stop = nullptr;
    const double v = std::strtod(value.c_str(), &stop);
    if (stop != value.c_str() && *stop == '\0') {
      out[std::string(trim(line.substr(0, space)))] = v;
    }
  }
  return out;
}

Result<std::string> http_exchange(std::uint16_t port, const std::string& request,
                                  std::chrono::milliseconds timeout) {
  using Clock = std::chrono::steady_clock;
  const auto deadline = Clock::now() + timeout;
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) {
    const int err = errno;
    return fail(std::string("socket: ") + errno_text(err), err);
  }
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  // NOLINTNEXTLINE(cppcoreguidelines-pro-type-reinterpret-cast): the sockets API
  if (::connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0 &&
      errno != EINPROGRESS) {
    const int err = errno;
    return fail("connect 127.0.0.1:" + std::to_string(port) + ": " + errno_text(err), err);
  }
  std::string_view out = request;
  std::string in;
  char buf[65536];
  while (true) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) {
      return fail("no complete answer within " + std::to_string(timeout.count()) + " ms",
                  ETIMEDOUT);
    }
    pollfd p{.fd = fd, .events = static_cast<short>(out.empty() ? POLLIN : POLLOUT), .revents = 0};
    const int n = ::poll(&p, 1, static_cast<int>(left.count()));
    if (n < 0 && errno != EINTR) {
      const int err = errno;
      return fail(std::string("poll: ") + errno_text(err), err);
    }
    if (n <= 0) {
      continue;
    }
    if (!out.empty()) {
      const ssize_t w = ::send(fd, out.data(), out.size(), MSG_NOSIGNAL);
      if (w < 0 && errno != EAGAIN && errno != EINTR) {
        const int err = errno;
        return fail("send to 127.0.0.1:" + std::to_string(port) + ": " + errno_text(err), err);
      }
      out.remove_prefix(w > 0 ? static_cast<std::size_t>(w) : 0);
      continue;
    }
    const ssize_t r = ::recv(fd, buf, sizeof buf, 0);
    if (r == 0) {
      return in;
    }
    if (r < 0 && errno != EAGAIN && errno != EINTR) {
      const int err = errno;
      return fail("recv from 127.0.0.1:" + std::to_string(port) + ": " + errno_text(err), err);
    }
    in.append(buf, r > 0 ? static_cast<std::size_t>(r) : 0);
  }
}

}  // namespace kvtier::bench::loadgen
