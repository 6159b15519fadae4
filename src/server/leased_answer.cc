#include "server/leased_answer.h"

#include <algorithm>
#include <atomic>
#include <memory>
#include <string>

#include "server/routes.h"

namespace kvw::server {
namespace {

// Status line and headers of a built answer, at most (a few short fields).
constexpr uint64_t kHeadBytes = 512;

ApiError never_fits(ServerState& st, uint64_t bytes, const char* param) {
  ApiError e(RefusalReason::kInvalidRequest,
             "the answer would hold " + std::to_string(bytes) +
                 " bytes of request memory, more than --request-memory (" +
                 std::to_string(st.cfg.http.request_memory_bytes) + ")");
  return param != nullptr ? e.with_param(param) : e;
}

ApiError not_now(ServerState& st, uint64_t bytes) {
  return ApiError(RefusalReason::kRequestMemory,
                  "request memory (--request-memory " +
                      std::to_string(st.cfg.http.request_memory_bytes) +
                      " bytes) cannot hold this answer (" + std::to_string(bytes) +
                      " bytes) now; retry later")
      .with_retry_after(st.admission.retry_after_s());
}

}  // namespace

void LeasedAnswer::poll(http::StreamOutput& out) {
  out.head = true;
  out.status = built_.status;
  out.content_type = std::move(built_.content_type);
  out.headers = std::move(built_.headers);
  out.chunked = false;
  out.data = std::move(built_.body);
  out.end = true;
}

uint64_t answer_hold_bytes(uint64_t body_bytes) {
  return 2 * body_bytes + kHeadBytes;
}

std::optional<ApiError> charge_building(ServerState& st, http::ByteLease& lease, uint64_t extra,
                                        const char* param) {
  const uint64_t want = lease.bytes() + extra;
  if (want > st.cfg.http.request_memory_bytes) return never_fits(st, want, param);
  if (lease.resize(want)) return std::nullopt;
  return not_now(st, want);
}

std::optional<ApiError> hold_answer(ServerState& st, http::HttpResponse& res, http::ByteLease lease,
                                    const char* param) {
  const uint64_t want = answer_hold_bytes(res.body.size());
  if (want > st.cfg.http.request_memory_bytes) return never_fits(st, want, param);
  if (!lease.resize(want)) return not_now(st, want);
  const bool close = res.close;
  auto stream = std::make_shared<LeasedAnswer>(std::move(res), std::move(lease));
  res = http::HttpResponse{};
  res.stream = std::move(stream);
  res.close = close;
  return std::nullopt;
}

http::Handler charge_answer(ServerState& st,
                            std::function<std::optional<http::ByteLease>(uint64_t)> reserve,
                            http::Handler handler) {
  // Why 64 KiB to start: the first answer of a small server's block map or trace is about that.
  auto last_bytes = std::make_shared<std::atomic<uint64_t>>(64u << 10);
  return [&st, reserve = std::move(reserve), handler = std::move(handler), last_bytes](
             http::HttpRequest& req, http::HttpResponse& res) {
    // At most all of request memory: whether the answer could ever fit is known once built.
    const uint64_t guess =
        std::min(answer_hold_bytes(last_bytes->load()), st.cfg.http.request_memory_bytes);
    std::optional<http::ByteLease> lease = reserve(guess);
    if (!lease) return send_error(st, res, not_now(st, guess));
    handler(req, res);
    last_bytes->store(res.body.size());
    if (auto e = hold_answer(st, res, std::move(*lease), nullptr)) send_error(st, res, *e);
  };
}

}  // namespace kvw::server
