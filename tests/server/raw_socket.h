// tests/server/raw_socket.h: a raw TCP client for tests that must send exactly some bytes (headers
// without their body, half a request) and watch how the server answers and closes.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <string>

namespace kvw::server::raw_socket {

// A connected socket to 127.0.0.1:port, or -1. rcvbuf > 0: SO_RCVBUF set before connecting.
inline int connect_to(int port, int rcvbuf = 0) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (rcvbuf > 0) ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof rcvbuf);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons((uint16_t)port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

inline bool send_all(int fd, const std::string& s) {
  size_t off = 0;
  while (off < s.size()) {
    const ssize_t n = ::send(fd, s.data() + off, s.size() - off, MSG_NOSIGNAL);
    if (n <= 0) return false;
    off += (size_t)n;
  }
  return true;
}

// Reads until the peer closes or `timeout` passes; `closed` tells which.
inline std::string read_until_close(int fd, std::chrono::milliseconds timeout, bool& closed) {
  using Clock = std::chrono::steady_clock;
  std::string out;
  const auto end = Clock::now() + timeout;
  closed = false;
  char buf[4096];
  while (Clock::now() < end) {
    pollfd p{fd, POLLIN, 0};
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(end - Clock::now());
    if (::poll(&p, 1, (int)std::max<int64_t>(1, left.count())) <= 0) continue;
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) {
      closed = true;
      break;
    }
    out.append(buf, (size_t)n);
  }
  return out;
}

}  // namespace kvw::server::raw_socket
