// tests/loadgen/fake_server.h: a tiny in-process OpenAI-compatible server (cpp-httplib) with
// known delays, so the load generator's measurements can be checked against them.
// Request body knobs: max_tokens (chunks streamed), fake_first_ms (delay before the first
// chunk), fake_gap_ms (between chunks), fake_status (answer with this status instead),
// fake_no_usage (omit the usage chunk), fake_refuse_first: N with fake_refuse_status (default 503)
// (refuse the first N attempts of each distinct body, so a retry can then succeed), and
// fake_retry_after / fake_retry_after_ms (send these headers with a refusal: a number or, for
// Retry-After, an HTTP date). /tokenize counts space-separated words.
#pragma once

#include <httplib.h>

#include <atomic>
#include <chrono>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

namespace kvw::loadgen::testing {

class FakeServer {
 public:
  explicit FakeServer(size_t num_threads = 64, bool with_metrics = true) {
    server_.new_task_queue = [num_threads] { return new httplib::ThreadPool(num_threads); };
    server_.set_keep_alive_max_count(100000);
    server_.set_read_timeout(60, 0);
    server_.set_write_timeout(60, 0);
    server_.Get("/health", [](const httplib::Request&, httplib::Response& res) {
      res.set_content("ok", "text/plain");
    });
    server_.Get("/v1/models", [](const httplib::Request&, httplib::Response& res) {
      res.set_content(R"({"object":"list","data":[{"id":"fake-model","object":"model"}]})",
                      "application/json");
    });
    server_.Post("/tokenize", [this](const httplib::Request& req, httplib::Response& res) {
      ++num_tokenize_;
      auto j = nlohmann::json::parse(req.body);
      const std::string p = j.value("prompt", "");
      int n = 0;
      bool in_word = false;
      for (char c : p) {
        if (c != ' ' && !in_word) ++n;
        in_word = c != ' ';
      }
      res.set_content(nlohmann::json{{"count", n}}.dump(), "application/json");
    });
    if (with_metrics) {
      server_.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
        ++num_scrapes_;
        res.set_content(
            "# TYPE kvwarden_kv_usage_ratio gauge\nkvwarden_kv_usage_ratio " +
                std::to_string(active_.load() / 100.0) +
                "\nkvwarden_kv_fragmentation_ratio 0.1\nkvwarden_requests{state=\"waiting\"} 0\n"
                "kvwarden_preemptions_total{mode=\"swap\"} 0\n"
                "kvwarden_process_resident_memory_bytes 100000000\n",
            "text/plain; version=0.0.4");
      });
    }
    for (const char* path : {"/v1/completions", "/v1/chat/completions"}) {
      const bool chat = std::string(path).find("chat") != std::string::npos;
      server_.Post(path, [this, chat](const httplib::Request& req, httplib::Response& res) {
        complete(req, res, chat);
      });
    }
    // libcpp-httplib is compiled with listen backlog 5; a burst of connects then loses
    // handshakes for minutes. Keep the listening fd and widen its backlog after bind.
    server_.set_socket_options([this](int fd) {
      const int one = 1;
      setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
      listen_fd_ = fd;
    });
    port_ = server_.bind_to_any_port("127.0.0.1");
    if (listen_fd_ >= 0) ::listen(listen_fd_, 4096);
    thread_ = std::thread([this] { server_.listen_after_bind(); });
    // stop() before the accept loop starts would be lost and join() would hang.
    while (!server_.is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ~FakeServer() {
    server_.stop();
    thread_.join();
  }
  int port() const { return port_; }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  int num_scrapes() const { return num_scrapes_; }
  int num_tokenize() const { return num_tokenize_; }
  int num_completions() const { return num_completions_; }  // attempts, refused ones included
  std::string last_body() {
    std::lock_guard<std::mutex> lock(mu_);
    return last_body_;
  }

 private:
  static void sleep_ms(double ms) {
    std::this_thread::sleep_for(std::chrono::microseconds(static_cast<int64_t>(ms * 1000)));
  }

  void complete(const httplib::Request& req, httplib::Response& res, bool chat) {
    ++num_completions_;
    int attempt = 0;
    {
      std::lock_guard<std::mutex> lock(mu_);
      last_body_ = req.body;
      attempt = attempts_by_body_[req.body]++;
    }
    auto j = nlohmann::json::parse(req.body, nullptr, false);
    if (j.is_discarded()) {
      res.status = 400;
      return;
    }
    int status = j.value("fake_status", 200);
    if (attempt < j.value("fake_refuse_first", 0)) status = j.value("fake_refuse_status", 503);
    if (status != 200) {
      res.status = status;
      const bool knobs = j.contains("fake_retry_after") || j.contains("fake_retry_after_ms");
      if (!knobs && (status == 429 || status == 503)) res.set_header("Retry-After", "1");
      for (const char* k : {"fake_retry_after", "fake_retry_after_ms"}) {
        if (!j.contains(k)) continue;
        const auto& v = j[k];
        const std::string header =
            std::string(k) == "fake_retry_after" ? "Retry-After" : "retry-after-ms";
        res.set_header(header, v.is_string() ? v.get<std::string>() : v.dump());
      }
      res.set_content(R"({"error":{"message":"fake refusal","type":"fake"}})", "application/json");
      return;
    }
    const int n = j.value("max_tokens", 4);
    const double first_ms = j.value("fake_first_ms", 100.0), gap_ms = j.value("fake_gap_ms", 20.0);
    const bool usage = !j.value("fake_no_usage", false);
    auto chunk = [chat](int i) {
      nlohmann::json c =
          chat ? nlohmann::json{{"choices",
                                 {{{"index", 0},
                                   {"delta", {{"content", " w" + std::to_string(i)}}}}}}}
               : nlohmann::json{{"choices", {{{"index", 0}, {"text", " w" + std::to_string(i)}}}}};
      return c;
    };
    if (!j.value("stream", false)) {
      sleep_ms(first_ms + gap_ms * (n - 1));
      std::string text;
      for (int i = 0; i < n; ++i) text += " w" + std::to_string(i);
      nlohmann::json out =
          chat ? nlohmann::json{{"choices",
                                 {{{"index", 0},
                                   {"message", {{"role", "assistant"}, {"content", text}}}}}}}
               : nlohmann::json{{"choices", {{{"index", 0}, {"text", text}}}}};
      if (usage) out["usage"] = {{"prompt_tokens", 7}, {"completion_tokens", n}};
      res.set_content(out.dump(), "application/json");
      return;
    }
    ++active_;
    res.set_chunked_content_provider("text/event-stream", [this, n, first_ms, gap_ms, usage, chunk,
                                                           chat](size_t, httplib::DataSink& sink) {
      if (chat) {  // a role-only first delta, as OpenAI sends: not a token
        const std::string role =
            "data: {\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\"}}]}\n\n";
        sink.write(role.data(), role.size());
      }
      for (int i = 0; i < n; ++i) {
        sleep_ms(i == 0 ? first_ms : gap_ms);
        const std::string ev = "data: " + chunk(i).dump() + "\n\n";
        if (!sink.write(ev.data(), ev.size())) break;
      }
      if (usage) {
        const std::string u =
            "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":7,\"completion_tokens\":" +
            std::to_string(n) + "}}\n\n";
        sink.write(u.data(), u.size());
      }
      sink.write("data: [DONE]\n\n", 14);
      sink.done();
      --active_;
      return true;
    });
  }

  httplib::Server server_;
  std::thread thread_;
  int port_ = 0;
  int listen_fd_ = -1;
  std::atomic<int> active_{0}, num_scrapes_{0}, num_tokenize_{0}, num_completions_{0};
  std::mutex mu_;
  std::string last_body_;
  std::map<std::string, int> attempts_by_body_;  // for fake_refuse_first
};

}  // namespace kvw::loadgen::testing
