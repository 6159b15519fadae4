// kv_events/msgpack_writer.h: the few MessagePack forms a KV event batch needs, each in its
// smallest encoding as msgspec (vLLM's encoder) writes them. A writer of our own because
// Debian's msgpack-cxx (libmsgpack-cxx-dev) depends on libboost-dev 1.74, which conflicts with
// the libboost1.81-dev kvwarden builds with. Single-threaded value type.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace kvw::kv_events {

class MsgpackWriter {
 public:
  void nil() { out_ += char(0xc0); }
  void uint(uint64_t v);  // positive fixint, uint8/16/32/64
  void sint(int64_t v);   // uint() for v >= 0, else negative fixint, int8/16/32/64
  void f64(double v);     // float64 (msgspec writes every Python float as float64)
  void str(std::string_view s);
  void array(uint32_t n);  // header; the n elements follow

  const std::string& bytes() const { return out_; }
  std::string take() { return std::move(out_); }

 private:
  void be(uint64_t v, int num_bytes);  // big-endian, as MessagePack stores every number
  std::string out_;
};

}  // namespace kvw::kv_events
