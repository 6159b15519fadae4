// core/status.h: error values for bad input (files, flags, JSON).
// Expected resource outcomes use std::optional or enums instead; broken invariants use CHECK.
// Result<T> holds either a value or an Error whose message gives full context
// ("model.gguf: tensor 'blk.0.attn_q.weight': data offset 912 past end of file (800 bytes)").
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <variant>

namespace kvw {

// What kind of failure an Error is, decided where the fault is found. The server maps each
// kind to one HTTP status and OpenAI error (server/api_error.h); nothing classifies messages.
enum class ErrorKind : uint8_t {
  kInvalidInput,     // the request, file or flag is wrong
  kContextOverflow,  // a prompt (plus its output) does not fit the context
  kOverloaded,       // a bounded queue is full: retry later
  kUnavailable,      // shutting down
  kNumerics,         // the numerics guard ended the request (NaN/Inf)
  kQueueTimeout,     // no output within its queue-wait limit (--max-queue-wait): retry later
  kOutOfMemory,      // an allocation failed while serving this request: retry later
  kInternal,         // anything else
};

struct Error {
  std::string message;
  ErrorKind kind = ErrorKind::kInvalidInput;
};

// Status: success, or an Error.
class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(Error e) : error_(std::move(e.message)), kind_(e.kind), ok_(false) {}  // NOLINT
  static Status ok_status() { return Status(); }
  bool ok() const { return ok_; }
  const std::string& message() const { return error_; }
  ErrorKind kind() const { return kind_; }
  Error error() const { return Error{error_, kind_}; }

 private:
  std::string error_;
  ErrorKind kind_ = ErrorKind::kInvalidInput;
  bool ok_ = true;
};

// Result<T>: a T or an Error. Access value() only after checking ok().
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}  // NOLINT: implicit by design
  Result(Error e) : v_(std::move(e)) {}      // NOLINT: implicit by design
  bool ok() const { return std::holds_alternative<T>(v_); }
  explicit operator bool() const { return ok(); }
  T& value() & { return std::get<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() { return value(); }
  const std::string& message() const { return std::get<Error>(v_).message; }
  ErrorKind kind() const { return std::get<Error>(v_).kind; }
  Error error() const { return std::get<Error>(v_); }

 private:
  std::variant<T, Error> v_;
};

}  // namespace kvw

// Propagate an error from an expression yielding Status or Result<T>.
#define KVW_RETURN_IF_ERROR(expr)              \
  do {                                         \
    auto _kvw_st = (expr);                     \
    if (!_kvw_st.ok()) return _kvw_st.error(); \
  } while (0)
