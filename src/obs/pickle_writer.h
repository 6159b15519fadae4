// obs/pickle_writer.h: a tiny Python pickle (protocol 2) encoder for plain data: dicts, lists,
// str, int (64-bit), float, None, bool. Enough for PyTorch's memory snapshot format, which the
// memory_viz viewer loads with pickle.load.
// Usage: w.begin_dict(); w.key("a"); w.integer(1); w.end_dict(); std::string bytes = w.finish();
// Owner: one caller; not thread-safe. Misuse (end without begin) is CHECKed.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace kvw::obs {

class PickleWriter {
 public:
  PickleWriter();  // writes the PROTO 2 header

  void begin_dict();  // EMPTY_DICT MARK; pairs follow as key(), value
  void end_dict();    // SETITEMS
  void begin_list();  // EMPTY_LIST MARK
  void end_list();    // APPENDS
  void key(std::string_view k) { str(k); }

  void str(std::string_view s);  // BINUNICODE (UTF-8 bytes, length-prefixed)
  void integer(int64_t v);       // BININT1/BININT2/BININT or LONG1 past 32 bits
  void real(double v);           // BINFLOAT (big-endian IEEE-754)
  void none();
  void boolean(bool b);

  // Appends STOP and returns the bytes; the writer must not be used afterwards.
  std::string finish();

 private:
  std::string out_;
  std::vector<char> open_;  // 'd' or 'l' per open container
};

}  // namespace kvw::obs
