// tests/http_torture/raw_http.cc: see raw_http.h.
#include "raw_http.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>

namespace kvw::torture {
namespace {

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r'))
    s.remove_suffix(1);
  return std::string(s);
}

// Decodes a chunked body; returns true once the terminating zero-size chunk has arrived.
bool decode_chunked(std::string_view in, std::string& out) {
  out.clear();
  size_t pos = 0;
  for (;;) {
    size_t eol = in.find("\r\n", pos);
    if (eol == std::string_view::npos) return false;
    size_t size = 0;
    std::string_view line = in.substr(pos, eol - pos);
    size_t digits = 0;
    for (char c : line) {
      if (!std::isxdigit(static_cast<unsigned char>(c))) break;
      size = size * 16 + static_cast<size_t>(std::isdigit(static_cast<unsigned char>(c))
                                                 ? c - '0'
                                                 : std::tolower(c) - 'a' + 10);
      ++digits;
    }
    if (digits == 0) return false;  // malformed; completes only by close
    pos = eol + 2;
    if (size == 0) return true;
    if (in.size() < pos + size + 2) return false;
    out.append(in.substr(pos, size));
    pos += size + 2;
  }
}

// Parses what has arrived so far; returns true when `raw` holds a whole response.
bool parse_response(std::string_view raw, bool closed, RawResponse& r) {
  size_t head_end = raw.find("\r\n\r\n");
  if (head_end == std::string_view::npos) return false;
  std::string_view head = raw.substr(0, head_end);
  size_t eol = head.find("\r\n");
  std::string_view status_line = head.substr(0, eol);
  if (status_line.substr(0, 5) != "HTTP/") return false;
  size_t sp = status_line.find(' ');
  r.status =
      sp == std::string_view::npos ? 0 : std::atoi(std::string(status_line.substr(sp + 1)).c_str());
  r.headers.clear();
  while (eol != std::string_view::npos) {
    size_t next = head.find("\r\n", eol + 2);
    std::string_view line =
        head.substr(eol + 2, next == std::string_view::npos ? head.npos : next - eol - 2);
    size_t colon = line.find(':');
    if (colon != std::string_view::npos) {
      r.headers[lower(std::string(line.substr(0, colon)))] = trim(line.substr(colon + 1));
    }
    eol = next;
  }
  std::string_view body = raw.substr(head_end + 4);
  if (lower(r.header("transfer-encoding")).find("chunked") != std::string::npos) {
    return decode_chunked(body, r.body) || closed;
  }
  if (auto it = r.headers.find("content-length"); it != r.headers.end()) {
    size_t len = std::strtoull(it->second.c_str(), nullptr, 10);
    if (body.size() < len) return false;
    r.body = std::string(body.substr(0, len));
    return true;
  }
  r.body = std::string(body);
  return closed || r.status == 204 || r.status == 304 || (r.status >= 100 && r.status < 200);
}

struct Conn {
  int fd = -1;
  bool started = false;
  bool connected = false;
  bool done = false;
  bool write_failed = false;
  size_t sent = 0;
  std::string in;
  Clock::time_point t0;
};

void finish(Conn& c, RawResponse& r, const std::string& error) {
  if (c.fd >= 0) ::close(c.fd);
  c.fd = -1;
  c.done = true;
  if (!r.complete && r.error.empty()) r.error = error;
  r.latency_ms = std::chrono::duration<double, std::milli>(Clock::now() - c.t0).count();
}

// Drains the socket; returns false when the peer closed or reset.
bool drain(int fd, std::string& into) {
  char buf[16384];
  for (;;) {
    ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n > 0) {
      into.append(buf, static_cast<size_t>(n));
      continue;
    }
    if (n == 0) return false;
    if (errno == EINTR) continue;
    return errno == EAGAIN || errno == EWOULDBLOCK;
  }
}

void step_conn(Conn& c, const std::string& raw, short revents, RawResponse& r) {
  if (!c.connected && (revents & (POLLOUT | POLLERR | POLLHUP))) {
    int err = 0;
    socklen_t len = sizeof(err);
    ::getsockopt(c.fd, SOL_SOCKET, SO_ERROR, &err, &len);
    if (err != 0) return finish(c, r, std::string("connect: ") + std::strerror(err));
    c.connected = true;
  }
  if (c.connected && (revents & POLLOUT) && !c.write_failed && c.sent < raw.size()) {
    ssize_t n = ::send(c.fd, raw.data() + c.sent, raw.size() - c.sent, MSG_NOSIGNAL);
    if (n > 0)
      c.sent += static_cast<size_t>(n);
    else if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
      c.write_failed = true;  // the server may have answered early (413) and closed; keep reading
    }
  }
  if (revents & (POLLIN | POLLHUP | POLLERR)) {
    bool open = drain(c.fd, c.in);
    r.complete = parse_response(c.in, !open, r);
    if (r.complete) return finish(c, r, "");
    if (!open) {
      return finish(c, r,
                    c.in.empty()
                        ? "closed without a response"
                        : "closed mid-response (" + std::to_string(c.in.size()) + " bytes)");
    }
  }
}

}  // namespace

std::string RawResponse::header(const std::string& lower_name) const {
  auto it = headers.find(lower_name);
  return it == headers.end() ? std::string() : it->second;
}

std::string RawResponse::describe() const {
  std::string s = "status=" + std::to_string(status) + (complete ? " complete" : " incomplete") +
                  (timed_out ? " timed_out" : "");
  if (!error.empty()) s += " error='" + error + "'";
  s += " body='" + body.substr(0, 300) + "'";
  return s;
}

std::string make_request(std::string_view method, std::string_view target, std::string_view body,
                         std::string_view extra_headers) {
  std::string r;
  r.reserve(body.size() + extra_headers.size() + 200);
  r.append(method).append(" ").append(target).append(" HTTP/1.1\r\nHost: 127.0.0.1\r\n");
  r.append("Connection: close\r\n");
  if (!body.empty() || method == "POST") {
    r.append("Content-Type: application/json\r\nContent-Length: ")
        .append(std::to_string(body.size()))
        .append("\r\n");
  }
  r.append(extra_headers).append("\r\n").append(body);
  return r;
}

std::string make_post_json(std::string_view target, std::string_view json) {
  return make_request("POST", target, json);
}

std::string make_get(std::string_view target) {
  return make_request("GET", target, "");
}

int connect_loopback(uint16_t port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 &&
      errno != EINPROGRESS) {
    ::close(fd);
    return -1;
  }
  return fd;
}

std::vector<RawResponse> run_batch(uint16_t port, const std::vector<PlannedRequest>& requests,
                                   Millis deadline) {
  std::vector<RawResponse> out(requests.size());
  std::vector<Conn> conns(requests.size());
  std::vector<size_t> order(requests.size());  // indices by start time
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return requests[a].start_after < requests[b].start_after;
  });
  const auto t_start = Clock::now();
  size_t next_start = 0, num_done = 0;
  std::vector<pollfd> pfds;
  std::vector<size_t> pidx;
  while (num_done < requests.size()) {
    auto now = Clock::now();
    if (now - t_start > deadline) break;
    while (next_start < order.size() && now - t_start >= requests[order[next_start]].start_after) {
      size_t i = order[next_start++];
      Conn& c = conns[i];
      c.started = true;
      c.t0 = Clock::now();
      c.fd = connect_loopback(port);
      if (c.fd < 0) {
        finish(c, out[i], std::string("connect: ") + std::strerror(errno));
        ++num_done;
      }
    }
    pfds.clear();
    pidx.clear();
    for (size_t i = 0; i < conns.size(); ++i) {
      const Conn& c = conns[i];
      if (!c.started || c.done) continue;
      short ev = POLLIN;
      if (!c.connected || (!c.write_failed && c.sent < requests[i].raw.size())) ev |= POLLOUT;
      pfds.push_back({c.fd, ev, 0});
      pidx.push_back(i);
    }
    int wait_ms = 50;
    if (next_start < order.size()) {
      auto due = t_start + requests[order[next_start]].start_after;
      wait_ms = static_cast<int>(std::clamp<int64_t>(
          std::chrono::duration_cast<Millis>(due - Clock::now()).count(), 0, 50));
    }
    int n = ::poll(pfds.data(), pfds.size(), wait_ms);
    if (n <= 0) continue;
    for (size_t k = 0; k < pfds.size(); ++k) {
      if (pfds[k].revents == 0) continue;
      size_t i = pidx[k];
      step_conn(conns[i], requests[i].raw, pfds[k].revents, out[i]);
      if (conns[i].done) ++num_done;
    }
  }
  for (size_t i = 0; i < conns.size(); ++i) {
    if (conns[i].done) continue;
    out[i].timed_out = true;
    if (!conns[i].started) conns[i].t0 = Clock::now();
    finish(conns[i], out[i], "deadline passed");
  }
  return out;
}

RawResponse exchange(uint16_t port, const std::string& raw, Millis deadline) {
  return run_batch(port, {PlannedRequest{raw, Millis{0}, ""}}, deadline).front();
}

bool send_all(int fd, std::string_view bytes, Millis deadline) {
  const auto end = Clock::now() + deadline;
  while (!bytes.empty()) {
    ssize_t n = ::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
    if (n > 0) {
      bytes.remove_prefix(static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return false;
    if (Clock::now() > end) return false;
    pollfd p{fd, POLLOUT, 0};
    ::poll(&p, 1, 50);
  }
  return true;
}

bool read_some(int fd, std::string& into, Millis wait) {
  pollfd p{fd, POLLIN, 0};
  if (::poll(&p, 1, static_cast<int>(wait.count())) <= 0) return true;
  return drain(fd, into);
}

uint16_t free_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof(addr);
  uint16_t port = 0;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
    port = ntohs(addr.sin_port);
  }
  ::close(fd);
  return port;
}

}  // namespace kvw::torture
