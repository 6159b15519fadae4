// Hostile-input corpus for GgufFile::open, generated here: a valid file from GgufWriter is
// corrupted field by field (located by searching for its key or tensor name), and each open must
// fail with an error naming the file and the field. A seeded mutation fuzzer checks that no
// corruption crashes or yields out-of-bounds tensors (run under ASan/UBSan by scripts/test.sh).

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <random>

#include "gguf/gguf_file.h"
#include "gguf/gguf_writer.h"
#include "gguf_test_util.h"

namespace kvw {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;
using testing_util::find_bytes;
using testing_util::peek;
using testing_util::poke;

class Hostile : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing_util::make_temp_dir();
    GgufWriter w;
    w.set_string("general.architecture", "llama");  // key #0
    w.set_u32("foo", 7);                            // key #1
    w.set_u32("fop", 8);                            // key #2
    w.set_i32_array("arr", {1, 2, 3});              // key #3
    w.set_bool("flag", true);                       // key #4
    w.set("nest", GgufValue::array(GgufValueType::kArray,
                                   {GgufValue::array(GgufValueType::kString,
                                                     {GgufValue::str("s")})}));      // key #5
    w.add_tensor("a", GgmlType::kF32, {8, 2}, std::vector<uint8_t>(64, 1));          // offset 0
    w.add_tensor("blk.0.w", GgmlType::kQ8_0, {32, 2}, std::vector<uint8_t>(68, 2));  // 64
    w.add_tensor("blk.0.v", GgmlType::kF32, {4}, std::vector<uint8_t>(16, 3));       // 160
    ASSERT_TRUE(w.write(dir_ + "/good.gguf").ok());
    good_ = testing_util::read_bytes(dir_ + "/good.gguf");
    ASSERT_TRUE(GgufFile::open(dir_ + "/good.gguf").ok());
  }

  // Offset of a metadata value (after key string and type) and of a tensor info's n_dims.
  size_t value_of(std::string_view key) const { return find_bytes(good_, key) + key.size() + 4; }
  size_t type_of(std::string_view key) const { return find_bytes(good_, key) + key.size(); }
  size_t info_of(std::string_view name) const { return find_bytes(good_, name) + name.size(); }

  // Writes `bytes` as bad.gguf and expects open() to fail with "<path>: <phrase>...".
  void expect_error(const std::vector<uint8_t>& bytes, const std::string& phrase) {
    const std::string path = dir_ + "/bad.gguf";
    testing_util::write_bytes(path, bytes);
    auto f = GgufFile::open(path);
    ASSERT_FALSE(f.ok()) << "expected: " << phrase;
    EXPECT_THAT(f.message(), StartsWith(path + ": "));
    EXPECT_THAT(f.message(), HasSubstr(phrase));
  }

  std::string dir_;
  std::vector<uint8_t> good_;
};

TEST_F(Hostile, BadMagic) {
  auto b = good_;
  b[3] = 'X';
  expect_error(b, "header: bad magic 'GGUX' (expected 'GGUF')");
  b[0] = 0;
  b[1] = 0xFF;
  expect_error(b, "header: bad magic '\\x00\\xFFUX' (expected 'GGUF')");
}

TEST_F(Hostile, UnsupportedVersions) {
  for (uint32_t v : {0u, 1u, 4u, 99u, 0xFFFFFFFFu}) {
    auto b = good_;
    poke<uint32_t>(b, 4, v);
    expect_error(b, "header: unsupported version " + std::to_string(v));
  }
}

TEST_F(Hostile, TruncationAnywhereBeforeTheLastTensorEndFails) {
  auto f = GgufFile::open(dir_ + "/good.gguf");
  ASSERT_TRUE(f.ok());
  const GgufTensorInfo& last = (*f)->tensors().back();
  const size_t data_bytes = last.offset + (last.num_bytes + 31) / 32 * 32;
  const size_t needed = good_.size() - data_bytes + last.offset + last.num_bytes;
  ASSERT_LT(needed, good_.size()) << "the writer pads after the last tensor";
  for (size_t len = 0; len < good_.size(); ++len) {
    const std::vector<uint8_t> b(good_.begin(), good_.begin() + static_cast<ptrdiff_t>(len));
    if (len >= needed) {
      testing_util::write_bytes(dir_ + "/cut.gguf", b);
      EXPECT_TRUE(GgufFile::open(dir_ + "/cut.gguf").ok()) << "only trailing padding cut: " << len;
    } else {
      SCOPED_TRACE("truncated to " + std::to_string(len));
      expect_error(b, "past end of file");
    }
  }
}

TEST_F(Hostile, AbsurdHeaderCounts) {
  auto b = good_;
  poke<uint64_t>(b, 8, uint64_t{1} << 60);
  expect_error(
      b,
      "header: n_tensors 1152921504606846976 runs past end of file (each needs at least 24 bytes");
  b = good_;
  poke<uint64_t>(b, 16, ~uint64_t{0});
  expect_error(
      b, "header: n_kv 18446744073709551615 runs past end of file (each needs at least 13 bytes");
  // Off by one: the parser walks into the next section and must still fail cleanly (where
  // depends on what it misreads, so only the path prefix is checked).
  b = good_;
  poke<uint64_t>(b, 8, 4);
  expect_error(b, "");
  b = good_;
  poke<uint64_t>(b, 16, 7);
  expect_error(b, "");
}

TEST_F(Hostile, StringLengthsPastEndOfFile) {
  auto b = good_;
  poke<uint64_t>(b, value_of("general.architecture"), 0xFFFFFFFFu);
  expect_error(b,
               "metadata key #0 'general.architecture': string length 4294967295 runs past "
               "end of file");
  b = good_;
  poke<uint64_t>(b, find_bytes(good_, "foo") - 8, ~uint64_t{0});
  expect_error(b, "metadata key #1: key length 18446744073709551615 runs past end of file");
  b = good_;
  poke<uint64_t>(b, find_bytes(good_, "blk.0.w") - 8, 1u << 20);
  expect_error(b, "tensor info #1: name length 1048576 runs past end of file");
}

TEST_F(Hostile, AbsurdArrayLengths) {
  auto b = good_;
  poke<uint64_t>(b, value_of("arr") + 4, uint64_t{1} << 62);
  expect_error(b,
               "metadata key #3 'arr': array length 4611686018427387904 of i32 runs past end "
               "of file");
  b = good_;
  poke<uint64_t>(b, value_of("nest") + 4, ~uint64_t{0});
  expect_error(b, "metadata key #5 'nest': array length 18446744073709551615 of array runs past");
}

TEST_F(Hostile, TooManyArrayElementsInTotal) {
  // 2^24 + 1 one-byte elements: the file justifies them, the in-memory cap does not.
  const uint64_t count = (uint64_t{1} << 24) + 1;
  std::vector<uint8_t> b(24);
  std::memcpy(b.data(), "GGUF", 4);
  poke<uint32_t>(b, 4, 3);
  poke<uint64_t>(b, 16, 1);
  const std::string key = "big";
  b.resize(24 + 8 + key.size() + 4 + 4 + 8 + count, 0);
  poke<uint64_t>(b, 24, key.size());
  std::memcpy(b.data() + 32, key.data(), key.size());
  poke<uint32_t>(b, 35, 9);  // array
  poke<uint32_t>(b, 39, 0);  // of u8
  poke<uint64_t>(b, 43, count);
  expect_error(b, "metadata key #0 'big': metadata arrays hold more than 16777216 elements");
}

TEST_F(Hostile, UnknownValueTypesAndBadBools) {
  auto b = good_;
  poke<uint32_t>(b, type_of("foo"), 13);
  expect_error(b, "metadata key #1 'foo': unknown value type 13");
  b = good_;
  poke<uint32_t>(b, value_of("arr"), 0xFFFFFFFF);
  expect_error(b, "metadata key #3 'arr': unknown array element type 4294967295");
  b = good_;
  b[value_of("flag")] = 2;
  expect_error(b, "metadata key #4 'flag': bool value 2 is not 0 or 1");
}

TEST_F(Hostile, DuplicateKeysAndTensorNames) {
  auto b = good_;
  b[find_bytes(good_, "fop") + 2] = 'o';
  expect_error(b, "metadata key #2 'foo': duplicate key (first at metadata key #1)");
  b = good_;
  b[find_bytes(good_, "blk.0.v") + 6] = 'w';
  expect_error(b, "tensor 'blk.0.w': duplicate tensor name (first is tensor #1)");
}

TEST_F(Hostile, NestingDepthLimit) {
  GgufValue v = GgufValue::array(GgufValueType::kInt32, {GgufValue::i32(1)});
  for (int i = 0; i < 9; ++i) v = GgufValue::array(GgufValueType::kArray, {v});
  GgufWriter w;
  w.set("deep", v);
  const std::string path = dir_ + "/deep.gguf";
  ASSERT_TRUE(w.write(path).ok());
  auto f = GgufFile::open(path);
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.message(), path + ": metadata key #0 'deep': arrays nested deeper than 8 levels");
}

TEST_F(Hostile, BadAlignment) {
  const std::pair<GgufValue, std::string> cases[] = {
      {GgufValue::u32(0), "alignment 0 is not a power of two"},
      {GgufValue::u32(48), "alignment 48 is not a power of two"},
      {GgufValue::i32(-32), "alignment -32 is not a power of two"},
      {GgufValue::str("32"), "must be an unsigned integer, got string"},
  };
  for (const auto& [value, phrase] : cases) {
    GgufWriter w;
    w.set("general.alignment", value);
    w.add_tensor("a", GgmlType::kF32, {8}, std::vector<uint8_t>(32));
    const std::string path = dir_ + "/align.gguf";
    ASSERT_TRUE(w.write(path).ok());
    auto f = GgufFile::open(path);
    ASSERT_FALSE(f.ok()) << phrase;
    EXPECT_EQ(f.message(), path + ": metadata 'general.alignment': " + phrase);
  }
  // A legal but huge alignment puts the data section past the end of the file.
  GgufWriter w;
  w.set("general.alignment", GgufValue::u64(uint64_t{1} << 62));
  w.add_tensor("a", GgmlType::kF32, {8}, std::vector<uint8_t>(32));
  ASSERT_TRUE(w.write(dir_ + "/huge.gguf").ok());
  auto f = GgufFile::open(dir_ + "/huge.gguf");
  ASSERT_FALSE(f.ok());
  EXPECT_THAT(f.message(),
              HasSubstr("data section: aligned start 4611686018427387904 is past end"));
}

TEST_F(Hostile, BadTensorShapes) {
  const size_t info = info_of("blk.0.w");  // n_dims u32, dims u64 x 2, type u32, offset u64
  auto b = good_;
  poke<uint32_t>(b, info, 5);
  expect_error(b, "tensor 'blk.0.w': n_dims 5 exceeds 4");
  b = good_;
  poke<uint32_t>(b, info, 0xFFFFFFFF);
  expect_error(b, "tensor 'blk.0.w': n_dims 4294967295 exceeds 4");
  b = good_;
  poke<uint64_t>(b, info + 4, uint64_t{1} << 40);
  poke<uint64_t>(b, info + 12, uint64_t{1} << 40);
  expect_error(b, "tensor 'blk.0.w': dims 1099511627776 x 1099511627776 overflow");
  b = good_;
  poke<uint64_t>(b, info + 4, uint64_t{1} << 63);
  expect_error(b, "tensor 'blk.0.w': dims 9223372036854775808 x 2 overflow");
  b = good_;
  poke<uint64_t>(b, info + 4, uint64_t{1} << 20);
  poke<uint64_t>(b, info + 12, uint64_t{1} << 20);
  expect_error(b, "tensor 'blk.0.w': 1099511627776 elements of q8_0 are larger than the file");
  b = good_;
  poke<uint64_t>(b, info + 4, 33);
  expect_error(b, "tensor 'blk.0.w': row length 33 is not a multiple of the q8_0 block size 32");
}

TEST_F(Hostile, UnknownTensorType) {
  auto b = good_;
  poke<uint32_t>(b, info_of("blk.0.w") + 20, 99);
  expect_error(b, "tensor 'blk.0.w': unknown type 99");
  poke<uint32_t>(b, info_of("blk.0.w") + 20, 16);  // IQ2_XXS: a real ggml type, not supported
  expect_error(b, "tensor 'blk.0.w': unknown type 16");
}

TEST_F(Hostile, BadTensorOffsets) {
  const size_t offset_at = info_of("blk.0.w") + 24;
  ASSERT_EQ(peek<uint64_t>(good_, offset_at), 64u);
  auto b = good_;
  poke<uint64_t>(b, offset_at, 68);
  expect_error(b, "tensor 'blk.0.w': offset 68 is not a multiple of alignment 32");
  b = good_;
  poke<uint64_t>(b, offset_at, 1u << 20);
  expect_error(b, "tensor 'blk.0.w': data at offset 1048576 (+68 bytes) runs past end of file");
  b = good_;
  poke<uint64_t>(b, offset_at, ~uint64_t{31});  // aligned, and offset + size wraps around
  expect_error(b, "tensor 'blk.0.w': data at offset 18446744073709551584 (+68 bytes) runs past");
  b = good_;
  poke<uint64_t>(b, offset_at, 160);  // in the file, but its 68 bytes run 52 past the end
  expect_error(b, "tensor 'blk.0.w': data at offset 160 (+68 bytes) runs past end of file");
}

TEST_F(Hostile, RandomMutationsNeverCrashOrEscapeTheFile) {
  std::mt19937 rng(20240611);
  const std::string path = dir_ + "/fuzz.gguf";
  const uint8_t interesting[] = {0x00, 0x01, 0x05, 0x09, 0x0d, 0x1f, 0x20, 0x7f, 0x80, 0xff};
  int num_opened = 0;
  for (int iter = 0; iter < 3000; ++iter) {
    auto b = good_;
    const int edits = 1 + static_cast<int>(rng() % 4);
    for (int e = 0; e < edits; ++e) {
      const size_t at = rng() % b.size();
      b[at] = rng() % 2 ? interesting[rng() % sizeof interesting] : static_cast<uint8_t>(rng());
    }
    if (rng() % 8 == 0) b.resize(rng() % b.size());
    testing_util::write_bytes(path, b);
    auto f = GgufFile::open(path);
    if (!f.ok()) {
      ASSERT_THAT(f.message(), StartsWith(path + ": ")) << iter;
      continue;
    }
    ++num_opened;
    const GgufFile& g = **f;
    uint64_t checksum = 0;
    for (const GgufTensorInfo& t : g.tensors()) {
      const uint8_t* begin = g.tensor_data(t);
      ASSERT_LE(t.offset + t.num_bytes, g.file_bytes()) << iter;
      if (t.num_bytes > 0) checksum += begin[0] + begin[t.num_bytes - 1];  // ASan/segv if OOB
    }
    EXPECT_GE(checksum, 0u);
  }
  // Mutations of metadata values and tensor data still open; the rest must not.
  EXPECT_GT(num_opened, 100);
  EXPECT_LT(num_opened, 3000);
}

}  // namespace
}  // namespace kvw
