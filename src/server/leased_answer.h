// server/leased_answer.h: answers built whole in a handler (/tokenize, /detokenize, /debug/*)
// hold request memory while they are built and until their last byte is written (issue 30).
// The transport keeps a response stream until its last byte is written, so the finished body
// goes out as a one-part stream that owns the lease.
// Thread safety: a LeasedAnswer is used by one connection's strand; the functions are
// thread-safe (request memory is a thread-safe budget).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>

#include "http/http_message.h"
#include "server/api_error.h"
#include "server/server_state.h"

namespace kvw::server {

class LeasedAnswer final : public http::ResponseStream {
 public:
  LeasedAnswer(http::HttpResponse built, http::ByteLease lease)
      : built_(std::move(built)), lease_(std::move(lease)) {}
  void start(std::function<void()>) override {}  // everything is ready: nothing to wake for
  void poll(http::StreamOutput& out) override;
  uint64_t lease_bytes() const { return lease_.bytes(); }

 private:
  http::HttpResponse built_;
  http::ByteLease lease_;
};

// Request memory an answer body of `body_bytes` holds while written: the body and the
// transport's framed copy of it, plus its head.
uint64_t answer_hold_bytes(uint64_t body_bytes);

// Grows `lease` to hold `extra` more bytes while an answer is built: nullopt when done; 400
// naming `param` when it could never fit --request-memory, 503 request_memory + Retry-After
// when it does not fit now (the lease is then unchanged).
std::optional<ApiError> charge_building(ServerState& st, http::ByteLease& lease, uint64_t extra,
                                        const char* param);

// Turns the built `res` into a LeasedAnswer holding `lease` resized to answer_hold_bytes of
// its body (shrinking always succeeds; growing may be refused as charge_building refuses, and
// then `res` is left as built).
std::optional<ApiError> hold_answer(ServerState& st, http::HttpResponse& res, http::ByteLease lease,
                                    const char* param);

// Wraps a handler whose answer has no size known before it is built (/debug/*): it reserves
// as much as the route's last answer before building (their size follows structures fixed at
// start-up: the block map, the trace ring), then holds the answer as hold_answer does.
// `reserve` takes request memory now or not at all (http::HttpServer::try_reserve).
http::Handler charge_answer(ServerState& st,
                            std::function<std::optional<http::ByteLease>(uint64_t)> reserve,
                            http::Handler handler);

}  // namespace kvw::server
