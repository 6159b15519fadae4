#include "kv_events/msgpack_writer.h"

#include <bit>

namespace kvw::kv_events {

void MsgpackWriter::be(uint64_t v, int num_bytes) {
  for (int i = num_bytes - 1; i >= 0; --i) out_ += char((v >> (8 * i)) & 0xff);
}

void MsgpackWriter::uint(uint64_t v) {
  if (v < 0x80) {
    out_ += char(v);
  } else if (v <= 0xff) {
    out_ += char(0xcc);
    be(v, 1);
  } else if (v <= 0xffff) {
    out_ += char(0xcd);
    be(v, 2);
  } else if (v <= 0xffffffffu) {
    out_ += char(0xce);
    be(v, 4);
  } else {
    out_ += char(0xcf);
    be(v, 8);
  }
}

void MsgpackWriter::sint(int64_t v) {
  if (v >= 0) return uint(uint64_t(v));
  const uint64_t u = uint64_t(v);
  if (v >= -32) {
    out_ += char(u & 0xff);  // negative fixint 0xe0..0xff
  } else if (v >= INT8_MIN) {
    out_ += char(0xd0);
    be(u, 1);
  } else if (v >= INT16_MIN) {
    out_ += char(0xd1);
    be(u, 2);
  } else if (v >= INT32_MIN) {
    out_ += char(0xd2);
    be(u, 4);
  } else {
    out_ += char(0xd3);
    be(u, 8);
  }
}

void MsgpackWriter::f64(double v) {
  out_ += char(0xcb);
  be(std::bit_cast<uint64_t>(v), 8);
}

void MsgpackWriter::str(std::string_view s) {
  const uint64_t n = s.size();
  if (n < 32) {
    out_ += char(0xa0 | n);
  } else if (n <= 0xff) {
    out_ += char(0xd9);
    be(n, 1);
  } else if (n <= 0xffff) {
    out_ += char(0xda);
    be(n, 2);
  } else {
    out_ += char(0xdb);
    be(n, 4);
  }
  out_ += s;
}

void MsgpackWriter::array(uint32_t n) {
  if (n < 16) {
    out_ += char(0x90 | n);
  } else if (n <= 0xffff) {
    out_ += char(0xdc);
    be(n, 2);
  } else {
    out_ += char(0xdd);
    be(n, 4);
  }
}

}  // namespace kvw::kv_events
