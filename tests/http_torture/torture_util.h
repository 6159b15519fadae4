// tests/http_torture/torture_util.h: shared pieces of the torture and overload suites: a served
// random-weight model, OpenAI error-shape checks and the "server is still fine" check that runs
// after every test. Test-thread only.
#pragma once

#include <gtest/gtest.h>
#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "raw_http.h"
#include "server_process.h"

namespace kvw::torture {

// A random-weight model in its own temp dir plus a running server; one per test suite.
struct ServedModel {
  std::unique_ptr<TempDir> dir;
  std::unique_ptr<ServerProcess> server;
  std::string model_id;  // first id from GET /v1/models
};

// Writes a generated model and starts `kvwarden serve` with `flags`; fails the suite on error.
std::unique_ptr<ServedModel> serve_generated_model(const std::vector<std::string>& flags);
// Starts `kvwarden serve --model MODEL flags...` on an existing file.
std::unique_ptr<ServedModel> serve_model_file(const std::string& model,
                                              const std::vector<std::string>& flags);
// SIGTERM; expects a clean exit (status 0).
void stop_and_expect_clean_exit(ServedModel& served);

// {"error":{"message":string,"type":string,"param":..,"code":..}} with the given status.
void expect_openai_error(const RawResponse& r, int status, const std::string& what);
// 429/503 must say when to come back.
void expect_retry_after(const RawResponse& r, const std::string& what);
// Process alive and GET /health answers 200.
void expect_server_healthy(ServedModel& served, const std::string& after);
// A 200 non-streaming completion/chat body with choices, finish_reason and usage.
void expect_completion_shape(const RawResponse& r, bool chat, const std::string& what);
// A 200 SSE body: data: JSON chunks, one finish_reason, ending with data: [DONE].
void expect_stream_shape(const RawResponse& r, const std::string& what);

// Process overhead beyond --memory-budget that VmHWM may show: code and shared libraries,
// thread stacks, allocator slack (README, "Serving limits").
inline constexpr uint64_t kFixedOverheadBytes = 64ull << 20;

// A sanitized build (ASan, TSan): its server decodes ~10x slower and its RSS is not the
// allocator's, so the load tests run a smaller size there and check RSS only in Release.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
inline constexpr bool kSanitized = true;
#else
inline constexpr bool kSanitized = false;
#endif

// /proc/PID/status fields in bytes (VmHWM: peak RSS, VmRSS: now); 0 when unreadable.
uint64_t vm_hwm_bytes(pid_t pid);
uint64_t vm_rss_bytes(pid_t pid);
// Sum of the Prometheus samples whose line starts with `series` (name plus labels); -1: none.
double metric_sum(const std::string& text, const std::string& series);
// The server runs on the repo's default model (the serving tests' realistic case).
std::unique_ptr<ServedModel> serve_default_model(const std::vector<std::string>& flags);

// JSON string escaping for building bodies by hand.
std::string json_quote(const std::string& s);

}  // namespace kvw::torture
