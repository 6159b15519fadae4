// tests/http_torture/torture_util.cc: see torture_util.h.
#include "torture_util.h"

#include <sys/wait.h>

#include <fstream>
#include <nlohmann/json.hpp>

namespace kvw::torture {

using nlohmann::json;

std::unique_ptr<ServedModel> serve_generated_model(const std::vector<std::string>& flags) {
  auto served = std::make_unique<ServedModel>();
  served->dir = std::make_unique<TempDir>();
  const std::string model = served->dir->path() + "/model.gguf";
  int rc = run_command({kvwarden_bin(), "make-model", "--out", model, "--seed", "7"});
  EXPECT_EQ(rc, 0) << "kvwarden make-model failed";
  auto started = serve_model_file(model, flags);
  started->dir = std::move(served->dir);
  return started;
}

std::unique_ptr<ServedModel> serve_model_file(const std::string& model,
                                              const std::vector<std::string>& flags) {
  auto served = std::make_unique<ServedModel>();
  served->server = std::make_unique<ServerProcess>();
  if (auto err = served->server->start(model, flags)) {
    ADD_FAILURE() << *err;
    return served;
  }
  RawResponse r = exchange(served->server->port(), make_get("/v1/models"));
  json j = json::parse(r.body, nullptr, false);
  EXPECT_EQ(r.status, 200) << r.describe();
  if (j.is_object() && j.contains("data") && j["data"].is_array() && !j["data"].empty() &&
      j["data"][0].contains("id") && j["data"][0]["id"].is_string()) {
    served->model_id = j["data"][0]["id"];
  } else {
    ADD_FAILURE() << "GET /v1/models: " << r.describe();
  }
  return served;
}

void stop_and_expect_clean_exit(ServedModel& served) {
  if (!served.server) return;
  int status = served.server->stop();
  EXPECT_TRUE(status >= 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0)
      << "SIGTERM should drain and exit 0; wait status " << status << "; output tail:\n"
      << served.server->output().substr(
             served.server->output().size() > 3000 ? served.server->output().size() - 3000 : 0);
}

void expect_openai_error(const RawResponse& r, int status, const std::string& what) {
  EXPECT_EQ(r.status, status) << what << ": " << r.describe();
  json j = json::parse(r.body, nullptr, false);
  bool shaped = j.is_object() && j.contains("error") && j["error"].is_object() &&
                j["error"].contains("message") && j["error"]["message"].is_string() &&
                !j["error"]["message"].get<std::string>().empty() && j["error"].contains("type") &&
                j["error"]["type"].is_string() && j["error"].contains("param") &&
                j["error"].contains("code");
  EXPECT_TRUE(shaped) << what << ": not an OpenAI error JSON: " << r.describe();
  EXPECT_NE(r.header("content-type").find("application/json"), std::string::npos)
      << what << ": content-type '" << r.header("content-type") << "'";
}

void expect_retry_after(const RawResponse& r, const std::string& what) {
  const std::string v = r.header("retry-after");
  EXPECT_TRUE(!v.empty() && v.find_first_not_of("0123456789") == std::string::npos)
      << what << ": status " << r.status << " needs Retry-After seconds, got '" << v << "'";
}

void expect_server_healthy(ServedModel& served, const std::string& after) {
  ASSERT_TRUE(served.server && served.server->alive()) << "server died after " << after;
  RawResponse r = exchange(served.server->port(), make_get("/health"), Millis{10000});
  EXPECT_EQ(r.status, 200) << "/health after " << after << ": " << r.describe();
}

void expect_completion_shape(const RawResponse& r, bool chat, const std::string& what) {
  ASSERT_EQ(r.status, 200) << what << ": " << r.describe();
  json j = json::parse(r.body, nullptr, false);
  ASSERT_TRUE(j.is_object()) << what << ": body is not JSON: " << r.describe();
  EXPECT_EQ(j.value("object", ""), chat ? "chat.completion" : "text_completion") << what;
  ASSERT_TRUE(j.contains("choices") && j["choices"].is_array() && !j["choices"].empty()) << what;
  for (const json& c : j["choices"]) {
    if (chat) {
      EXPECT_TRUE(c.contains("message") && c["message"].value("role", "") == "assistant" &&
                  c["message"].contains("content") && c["message"]["content"].is_string())
          << what << ": " << c.dump();
    } else {
      EXPECT_TRUE(c.contains("text") && c["text"].is_string()) << what << ": " << c.dump();
    }
    std::string fr = c.contains("finish_reason") && c["finish_reason"].is_string()
                         ? c["finish_reason"].get<std::string>()
                         : "";
    EXPECT_TRUE(fr == "stop" || fr == "length") << what << ": finish_reason '" << fr << "'";
  }
  ASSERT_TRUE(j.contains("usage") && j["usage"].is_object()) << what << ": " << r.body;
  const json& u = j["usage"];
  EXPECT_TRUE(u.value("prompt_tokens", -1) > 0 && u.value("completion_tokens", -1) >= 0 &&
              u.value("total_tokens", -1) ==
                  u.value("prompt_tokens", 0) + u.value("completion_tokens", 0))
      << what << ": usage " << u.dump();
}

void expect_stream_shape(const RawResponse& r, const std::string& what) {
  ASSERT_EQ(r.status, 200) << what << ": " << r.describe();
  EXPECT_NE(r.header("content-type").find("text/event-stream"), std::string::npos) << what;
  std::vector<std::string> data;
  size_t pos = 0;
  while (pos < r.body.size()) {
    size_t eol = r.body.find('\n', pos);
    std::string line = r.body.substr(pos, eol == std::string::npos ? std::string::npos : eol - pos);
    pos = eol == std::string::npos ? r.body.size() : eol + 1;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.rfind("data: ", 0) == 0) data.push_back(line.substr(6));
  }
  ASSERT_GE(data.size(), 2u) << what << ": " << r.describe();
  EXPECT_EQ(data.back(), "[DONE]") << what << ": stream must end with data: [DONE]";
  int num_finish = 0;
  for (size_t i = 0; i + 1 < data.size(); ++i) {
    json j = json::parse(data[i], nullptr, false);
    ASSERT_TRUE(j.is_object() && j.contains("choices")) << what << ": chunk " << data[i];
    for (const json& c : j["choices"]) {
      if (c.contains("finish_reason") && c["finish_reason"].is_string()) ++num_finish;
    }
  }
  EXPECT_EQ(num_finish, 1) << what << ": one finish_reason per choice";
}

std::string json_quote(const std::string& s) {
  return json(s).dump();
}

namespace {
uint64_t proc_status_bytes(pid_t pid, const std::string& field) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind(field, 0) == 0) return std::stoull(line.substr(field.size())) * 1024;
  }
  return 0;
}
}  // namespace

uint64_t vm_hwm_bytes(pid_t pid) {
  return proc_status_bytes(pid, "VmHWM:");
}
uint64_t vm_rss_bytes(pid_t pid) {
  return proc_status_bytes(pid, "VmRSS:");
}

double metric_sum(const std::string& text, const std::string& series) {
  double sum = 0;
  bool found = false;
  for (size_t at = 0; (at = text.find(series, at)) != std::string::npos; at += series.size()) {
    if (at > 0 && text[at - 1] != '\n') continue;
    const size_t sp = at + series.size();
    if (sp >= text.size() || text[sp] != ' ') continue;
    sum += std::stod(text.substr(sp + 1, text.find('\n', sp) - sp - 1));
    found = true;
  }
  return found ? sum : -1;
}

std::unique_ptr<ServedModel> serve_default_model(const std::vector<std::string>& flags) {
  return serve_model_file(KVW_DEFAULT_MODEL_PATH, flags);
}

}  // namespace kvw::torture
