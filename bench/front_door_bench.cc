// bench/front_door_bench.cc: what an OpenAI-compatible server's front door costs and holds,
// measured from outside (works against kvwarden serve and llama-server alike):
//   1. RSS of N idle keep-alive connections (each made one GET /health and stays open);
//   2. open streams in steps (each a streaming completion read as it arrives; finished ones are
//      replaced), and at each step /health latency (p50/p99 over 100 probes, 100 ms apart) and
//      the server's RSS, so memory per open stream and the largest step with p99 < 50 ms show.
// Usage: front_door_bench --host 127.0.0.1 --port 8000 --pid PID [--idle 10000]
//        [--streams 250,500,1000,2000] [--max-tokens 200] [--hold-s 4]
// The server needs keep-alive longer than the run and room for the connections (kvwarden:
// --keep-alive-timeout 600 --max-connections 16000 --max-queue 20000). bench/front_door.sh
// runs it against kvwarden (and llama-server when one is built).
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

struct Args {
  std::string host = "127.0.0.1";
  int port = 8000;
  int pid = 0;
  int idle = 10000;
  std::vector<int> streams = {250, 500, 1000, 2000};
  int max_tokens = 200;
  double hold_s = 4;
};

uint64_t rss_bytes(int pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stoull(line.substr(6)) * 1024;
  }
  return 0;
}

int connect_nb(const Args& a) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
  if (fd < 0) return -1;
  sockaddr_in s{};
  s.sin_family = AF_INET;
  s.sin_port = htons((uint16_t)a.port);
  ::inet_pton(AF_INET, a.host.c_str(), &s.sin_addr);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&s), sizeof s) != 0 && errno != EINPROGRESS) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// Blocking one-shot GET on its own connection; milliseconds, or -1 on failure/timeout (1 s).
double probe(const Args& a, const char* path, std::string* body = nullptr) {
  const auto t0 = Clock::now();
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  timeval tv{1, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  sockaddr_in s{};
  s.sin_family = AF_INET;
  s.sin_port = htons((uint16_t)a.port);
  ::inet_pton(AF_INET, a.host.c_str(), &s.sin_addr);
  double ms = -1;
  if (::connect(fd, reinterpret_cast<sockaddr*>(&s), sizeof s) == 0) {
    const std::string req =
        std::string("GET ") + path + " HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    ::send(fd, req.data(), req.size(), MSG_NOSIGNAL);
    char buf[4096];
    std::string got;
    ssize_t n;
    while ((n = ::recv(fd, buf, sizeof buf, 0)) > 0) got.append(buf, (size_t)n);
    if (got.starts_with("HTTP/1.1 200")) {
      ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
      if (body) *body = std::move(got);
    }
  }
  ::close(fd);
  return ms;
}

struct Probes {
  double p50 = 0, p99 = 0, max = 0;
  int failed = 0;
};

Probes probe_health(const Args& a, int n) {
  std::vector<double> v;
  Probes p;
  for (int i = 0; i < n; ++i) {
    const auto t0 = Clock::now();
    const double ms = probe(a, "/health");
    if (ms < 0) {
      ++p.failed;
    } else {
      v.push_back(ms);
    }
    std::this_thread::sleep_until(t0 + std::chrono::milliseconds(100));
  }
  if (v.empty()) return p;
  std::sort(v.begin(), v.end());
  p.p50 = v[v.size() / 2];
  p.p99 = v[(size_t)std::ceil(0.99 * (double)v.size()) - 1];  // nearest-rank p99
  p.max = v.back();
  return p;
}

// Connections driven by one epoll loop: each sends its request once writable and reads
// whatever comes; a stream is finished when its body holds "[DONE]" or the peer closes.
class Pool {
 public:
  explicit Pool(const Args& a) : a_(a), ep_(::epoll_create1(0)) {}
  ~Pool() {
    for (auto& [fd, c] : conns_) ::close(fd);
    ::close(ep_);
  }
  bool open(const std::string& request, bool stream) {
    const int fd = connect_nb(a_);
    if (fd < 0) return false;
    int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    conns_[fd] = Conn{request, 0, stream, false, {}};
    epoll_event ev{EPOLLIN | EPOLLOUT, {.fd = fd}};
    ::epoll_ctl(ep_, EPOLL_CTL_ADD, fd, &ev);
    return true;
  }
  // Runs the loop for `secs`; returns the number of streams that finished (and closes them).
  int run(double secs) {
    int finished = 0;
    const auto end = Clock::now() + std::chrono::duration<double>(secs);
    epoll_event evs[256];
    while (Clock::now() < end) {
      const int n = ::epoll_wait(ep_, evs, 256, 20);
      for (int i = 0; i < n; ++i) {
        const int fd = evs[i].data.fd;
        Conn& c = conns_[fd];
        if ((evs[i].events & EPOLLOUT) && c.sent < c.request.size()) {
          const ssize_t w =
              ::send(fd, c.request.data() + c.sent, c.request.size() - c.sent, MSG_NOSIGNAL);
          if (w > 0) c.sent += (size_t)w;
          if (c.sent == c.request.size()) {
            epoll_event ev{EPOLLIN, {.fd = fd}};
            ::epoll_ctl(ep_, EPOLL_CTL_MOD, fd, &ev);
          }
        }
        if (evs[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR)) {
          char buf[16384];
          ssize_t r;
          bool closed = false;
          while ((r = ::recv(fd, buf, sizeof buf, 0)) > 0) {
            c.tail.append(buf, (size_t)r);
            if (c.tail.size() > 64) c.tail.erase(0, c.tail.size() - 64);
          }
          if (r == 0 || (r < 0 && errno != EAGAIN)) closed = true;
          if (c.stream && (closed || c.tail.find("[DONE]") != std::string::npos)) {
            ++finished;
            ::close(fd);
            conns_.erase(fd);
          } else if (closed) {
            ++closed_idle_;
            ::close(fd);
            conns_.erase(fd);
          }
        }
      }
    }
    return finished;
  }
  size_t size() const { return conns_.size(); }
  int closed_idle() const { return closed_idle_; }

 private:
  struct Conn {
    std::string request;
    size_t sent = 0;
    bool stream = false;
    bool done = false;
    std::string tail;
  };
  const Args& a_;
  const int ep_;
  std::unordered_map<int, Conn> conns_;
  int closed_idle_ = 0;
};

std::vector<int> parse_list(const char* s) {
  std::vector<int> v;
  for (const char* p = s; *p;) {
    v.push_back(std::atoi(p));
    p = std::strchr(p, ',');
    if (!p) break;
    ++p;
  }
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    const char* v = argv[i + 1];
    if (k == "--host")
      a.host = v;
    else if (k == "--port")
      a.port = std::atoi(v);
    else if (k == "--pid")
      a.pid = std::atoi(v);
    else if (k == "--idle")
      a.idle = std::atoi(v);
    else if (k == "--streams")
      a.streams = parse_list(v);
    else if (k == "--max-tokens")
      a.max_tokens = std::atoi(v);
    else if (k == "--hold-s")
      a.hold_s = std::atof(v);
    else {
      std::fprintf(stderr, "unknown flag %s\n", k.c_str());
      return 2;
    }
  }
  if (a.pid <= 0) {
    std::fprintf(stderr, "usage: %s --port P --pid SERVER_PID [--idle N] [--streams a,b,c]\n",
                 argv[0]);
    return 2;
  }
  rlimit lim{};
  getrlimit(RLIMIT_NOFILE, &lim);
  lim.rlim_cur = lim.rlim_max;
  setrlimit(RLIMIT_NOFILE, &lim);

  const uint64_t rss0 = rss_bytes(a.pid);
  const Probes p0 = probe_health(a, 20);
  std::printf("baseline: RSS %.1f MiB, /health p50 %.2f ms p99 %.2f ms\n", rss0 / 1048576.0, p0.p50,
              p0.p99);

  if (a.idle > 0) {
    Pool idle(a);
    const std::string req = "GET /health HTTP/1.1\r\nHost: x\r\n\r\n";  // keep-alive
    int opened = 0;
    for (int i = 0; i < a.idle; ++i) opened += idle.open(req, false);
    idle.run(3);
    const uint64_t rss = rss_bytes(a.pid);
    const Probes p = probe_health(a, 20);
    std::printf(
        "idle keep-alive: %d opened, %zu still open, RSS %.1f MiB (+%.1f MiB, %.0f B per "
        "connection), /health p99 %.2f ms, %d probes failed\n",
        opened, idle.size(), rss / 1048576.0, (double)(rss - rss0) / 1048576.0,
        idle.size() ? (double)(rss - rss0) / (double)idle.size() : 0.0, p.p99, p.failed);
  }
  std::this_thread::sleep_for(std::chrono::seconds(2));  // idle connections closed by then
  const uint64_t rss_streams0 = rss_bytes(a.pid);
  Pool pool(a);
  const std::string body =
      "{\"prompt\":\"And God said\",\"max_tokens\":" + std::to_string(a.max_tokens) +
      ",\"temperature\":0.8,\"ignore_eos\":true,\"stream\":true}";
  const std::string req =
      "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
      "Content-Length: " +
      std::to_string(body.size()) + "\r\n\r\n" + body;
  int best = 0;
  std::printf("%8s %8s %10s %10s %10s %8s %12s %12s\n", "target", "open", "p50_ms", "p99_ms",
              "max_ms", "failed", "rss_MiB", "B/stream");
  for (int target : a.streams) {
    while ((int)pool.size() < target && pool.open(req, true)) {
    }
    // Hold the level: replace finished streams while measuring.
    const auto t_end = Clock::now() + std::chrono::duration<double>(a.hold_s);
    while (Clock::now() < t_end) {
      pool.run(0.2);
      while ((int)pool.size() < target && pool.open(req, true)) {
      }
    }
    std::thread prober;
    Probes p;
    prober = std::thread([&] { p = probe_health(a, 100); });
    const auto t_probe_end =
        Clock::now() + std::chrono::seconds(10) + std::chrono::milliseconds(200);
    while (Clock::now() < t_probe_end) {
      pool.run(0.2);
      while ((int)pool.size() < target && pool.open(req, true)) {
      }
    }
    prober.join();
    const uint64_t rss = rss_bytes(a.pid);
    const double per =
        pool.size() ? (double)(rss - std::min(rss, rss_streams0)) / (double)pool.size() : 0;
    std::printf("%8d %8zu %10.2f %10.2f %10.2f %8d %12.1f %12.0f\n", target, pool.size(), p.p50,
                p.p99, p.max, p.failed, rss / 1048576.0, per);
    // What the server says it holds (kvwarden's /metrics; other servers may not answer).
    std::string metrics;
    if (probe(a, "/metrics", &metrics) >= 0) {
      for (size_t at = 0; at < metrics.size();) {
        size_t nl = metrics.find('\n', at);
        if (nl == std::string::npos) nl = metrics.size();
        const std::string line = metrics.substr(at, nl - at);
        at = nl + 1;
        if (line.starts_with("kvwarden_requests{") || line.starts_with("kvwarden_http_streams ") ||
            line.starts_with("kvwarden_requests_shed_total{")) {
          std::printf("           %s\n", line.c_str());
        }
      }
    }
    std::fflush(stdout);
    if (p.failed == 0 && p.p99 < 50) best = target;
  }
  std::printf("largest step with /health p99 < 50 ms and no failed probe: %d streams\n", best);
  return 0;
}
