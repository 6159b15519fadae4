#include "obs/pickle_writer.h"

#include <cstring>

#include "core/check.h"

namespace kvw::obs {

namespace {
// Opcodes of pickle protocols 0-2 (CPython Lib/pickle.py).
constexpr char kProto = '\x80';
constexpr char kStop = '.';
constexpr char kMark = '(';
constexpr char kEmptyDict = '}';
constexpr char kSetItems = 'u';
constexpr char kEmptyList = ']';
constexpr char kAppends = 'e';
constexpr char kBinUnicode = 'X';
constexpr char kBinInt = 'J';
constexpr char kBinInt1 = 'K';
constexpr char kBinInt2 = 'M';
constexpr char kLong1 = '\x8a';
constexpr char kBinFloat = 'G';
constexpr char kNone = 'N';
constexpr char kNewTrue = '\x88';
constexpr char kNewFalse = '\x89';

void put_le(std::string& out, uint64_t v, int n) {
  for (int i = 0; i < n; ++i) out += char((v >> (8 * i)) & 0xff);
}
}  // namespace

PickleWriter::PickleWriter() {
  out_ += kProto;
  out_ += '\x02';
}

void PickleWriter::begin_dict() {
  out_ += kEmptyDict;
  out_ += kMark;
  open_.push_back('d');
}

void PickleWriter::end_dict() {
  CHECK(!open_.empty() && open_.back() == 'd') << "end_dict without begin_dict";
  open_.pop_back();
  out_ += kSetItems;
}

void PickleWriter::begin_list() {
  out_ += kEmptyList;
  out_ += kMark;
  open_.push_back('l');
}

void PickleWriter::end_list() {
  CHECK(!open_.empty() && open_.back() == 'l') << "end_list without begin_list";
  open_.pop_back();
  out_ += kAppends;
}

void PickleWriter::str(std::string_view s) {
  out_ += kBinUnicode;
  put_le(out_, s.size(), 4);
  out_ += s;
}

void PickleWriter::integer(int64_t v) {
  if (v >= 0 && v < 256) {
    out_ += kBinInt1;
    put_le(out_, uint64_t(v), 1);
  } else if (v >= 0 && v < 65536) {
    out_ += kBinInt2;
    put_le(out_, uint64_t(v), 2);
  } else if (v >= INT32_MIN && v <= INT32_MAX) {
    out_ += kBinInt;
    put_le(out_, uint64_t(uint32_t(int32_t(v))), 4);
  } else {
    // LONG1: little-endian two's complement, 8 bytes always suffice for int64.
    out_ += kLong1;
    out_ += '\x08';
    put_le(out_, uint64_t(v), 8);
  }
}

void PickleWriter::real(double v) {
  out_ += kBinFloat;
  uint64_t bits;
  std::memcpy(&bits, &v, sizeof bits);
  for (int i = 7; i >= 0; --i) out_ += char((bits >> (8 * i)) & 0xff);
}

void PickleWriter::none() {
  out_ += kNone;
}

void PickleWriter::boolean(bool b) {
  out_ += b ? kNewTrue : kNewFalse;
}

std::string PickleWriter::finish() {
  CHECK(open_.empty()) << "pickle has " << open_.size() << " unclosed containers";
  out_ += kStop;
  return std::move(out_);
}

}  // namespace kvw::obs
