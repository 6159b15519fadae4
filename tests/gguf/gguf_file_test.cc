// Tests for GgufWriter -> GgufFile round trips: every metadata value type (nested arrays too),
// every tensor type, v2 and v3, several alignments; typed getters and their errors; and the
// real stories260K model when KVW_TEST_MODELS is set.

#include "gguf/gguf_file.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <random>

#include "gguf/gguf_writer.h"
#include "gguf/tensor_types.h"
#include "gguf_test_util.h"

namespace kvw {
namespace {

using testing_util::make_temp_dir;

GgufValue make(GgufValueType t, uint64_t u) {
  return {t, u};
}
GgufValue make(GgufValueType t, int64_t i) {
  return {t, i};
}

// One key per scalar type (extremes where it matters), plus arrays and nested arrays.
std::vector<GgufKv> all_value_kinds() {
  using T = GgufValueType;
  std::vector<GgufKv> kvs = {
      {"u8", make(T::kUint8, uint64_t{255})},
      {"i8", make(T::kInt8, int64_t{-128})},
      {"u16", make(T::kUint16, uint64_t{65535})},
      {"i16", make(T::kInt16, int64_t{-32768})},
      {"u32", GgufValue::u32(4294967295u)},
      {"i32", GgufValue::i32(-2147483647 - 1)},
      {"f32", GgufValue::f32(-1.5e-7f)},
      {"bool.true", GgufValue::boolean(true)},
      {"bool.false", GgufValue::boolean(false)},
      {"str", GgufValue::str(std::string("h\xC3\xA9llo\0world", 12))},
      {"str.empty", GgufValue::str("")},
      {"u64", GgufValue::u64(18446744073709551615ull)},
      {"i64", make(T::kInt64, int64_t{-9223372036854775807 - 1})},
      {"f64", {T::kFloat64, 3.141592653589793}},
      {"arr.empty", GgufValue::array(T::kFloat32, {})},
      {"arr.u8",
       GgufValue::array(T::kUint8, {make(T::kUint8, uint64_t{0}), make(T::kUint8, uint64_t{200})})},
      {"arr.i16", GgufValue::array(T::kInt16, {make(T::kInt16, int64_t{-5})})},
      {"arr.f64", GgufValue::array(T::kFloat64, {{T::kFloat64, 1e300}, {T::kFloat64, -0.25}})},
      {"arr.bool",
       GgufValue::array(T::kBool, {GgufValue::boolean(true), GgufValue::boolean(false)})},
      {"arr.u64", GgufValue::array(T::kUint64, {GgufValue::u64(1ull << 63)})},
      {"arr.i64", GgufValue::array(T::kInt64, {make(T::kInt64, int64_t{-1})})},
  };
  // [[1, 2], [], [3]] and a three-level [[["a"], []]].
  kvs.push_back({"nested.i32",
                 GgufValue::array(T::kArray, {GgufValue::array(T::kInt32, {GgufValue::i32(1),
                                                                           GgufValue::i32(2)}),
                                              GgufValue::array(T::kInt32, {}),
                                              GgufValue::array(T::kInt32, {GgufValue::i32(3)})})});
  kvs.push_back({"nested.deep",
                 GgufValue::array(
                     T::kArray, {GgufValue::array(
                                    T::kArray, {GgufValue::array(T::kString, {GgufValue::str("a")}),
                                                GgufValue::array(T::kString, {})})})});
  return kvs;
}

void expect_same_value(const GgufValue& want, const GgufValue& got, const std::string& where) {
  ASSERT_EQ(want.type, got.type) << where;
  if (want.type == GgufValueType::kArray) {
    const auto& a = std::get<GgufArray>(want.v);
    const auto& b = std::get<GgufArray>(got.v);
    ASSERT_EQ(a.elem_type, b.elem_type) << where;
    ASSERT_EQ(a.items.size(), b.items.size()) << where;
    for (size_t i = 0; i < a.items.size(); ++i) {
      expect_same_value(a.items[i], b.items[i], where + "[" + std::to_string(i) + "]");
    }
    return;
  }
  ASSERT_EQ(want.v.index(), got.v.index()) << where;
  if (const auto* u = std::get_if<uint64_t>(&want.v)) {
    EXPECT_EQ(*u, std::get<uint64_t>(got.v)) << where;
  }
  if (const auto* i = std::get_if<int64_t>(&want.v)) {
    EXPECT_EQ(*i, std::get<int64_t>(got.v)) << where;
  }
  if (const auto* d = std::get_if<double>(&want.v)) {
    EXPECT_EQ(*d, std::get<double>(got.v)) << where;
  }
  if (const auto* s = std::get_if<std::string>(&want.v)) {
    EXPECT_EQ(*s, std::get<std::string>(got.v)) << where;
  }
}

struct TestTensor {
  std::string name;
  GgmlType type;
  std::vector<int64_t> shape;
  std::vector<uint8_t> data;
};

std::vector<TestTensor> all_tensor_types() {
  const std::pair<GgmlType, std::vector<int64_t>> specs[] = {
      {GgmlType::kF32, {3}},         {GgmlType::kF16, {5, 3}},         {GgmlType::kBF16, {2, 2, 2}},
      {GgmlType::kQ4_0, {64, 3}},    {GgmlType::kQ8_0, {32, 2, 1, 2}}, {GgmlType::kQ4_K, {256, 2}},
      {GgmlType::kQ5_K, {512}},      {GgmlType::kQ6_K, {256, 3}},      {GgmlType::kQ8_K, {256}},
      {GgmlType::kQ4_1, {96, 3}},    {GgmlType::kQ5_0, {896, 2}},      {GgmlType::kQ5_1, {32, 5}},
      {GgmlType::kIQ4_NL, {288}},    {GgmlType::kQ2_K, {256, 2}},      {GgmlType::kQ3_K, {768}},
      {GgmlType::kIQ4_XS, {512, 3}}, {GgmlType::kMXFP4, {2880, 2}},
  };
  std::mt19937 rng(1);
  std::normal_distribution<float> dist;
  std::vector<TestTensor> out;
  for (const auto& [type, shape] : specs) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    std::vector<float> x(n);
    for (float& v : x) v = dist(rng);
    std::vector<uint8_t> data(*row_bytes(type, shape[0]) * (n / shape[0]));
    for (int64_t r = 0; r < n / shape[0]; ++r) {
      quantize_row(type, x.data() + r * shape[0], data.data() + r * *row_bytes(type, shape[0]),
                   shape[0]);
    }
    out.push_back({"t." + std::string(type_traits(type).name), type, shape, std::move(data)});
  }
  return out;
}

struct Format {
  uint32_t version;
  uint64_t alignment;
};

class WriterReader : public ::testing::TestWithParam<Format> {};

TEST_P(WriterReader, EveryValueTypeAndTensorTypeSurvives) {
  const Format fmt = GetParam();
  GgufWriter w(fmt.version, fmt.alignment);
  const std::vector<GgufKv> kvs = all_value_kinds();
  for (const GgufKv& kv : kvs) w.set(kv.key, kv.value);
  const std::vector<TestTensor> tensors = all_tensor_types();
  for (const TestTensor& t : tensors) w.add_tensor(t.name, t.type, t.shape, t.data);
  const std::string path = make_temp_dir() + "/rt.gguf";
  ASSERT_TRUE(w.write(path).ok());

  auto f = GgufFile::open(path);
  ASSERT_TRUE(f.ok()) << f.message();
  EXPECT_EQ((*f)->version(), fmt.version);
  EXPECT_EQ((*f)->alignment(), fmt.alignment);
  // The writer adds general.alignment only when it differs from the default 32.
  const size_t extra = fmt.alignment != 32 ? 1 : 0;
  ASSERT_EQ((*f)->metadata().size(), kvs.size() + extra);
  for (size_t i = 0; i < kvs.size(); ++i) {
    EXPECT_EQ((*f)->metadata()[i].key, kvs[i].key);
    expect_same_value(kvs[i].value, (*f)->metadata()[i].value, kvs[i].key);
  }
  ASSERT_EQ((*f)->tensors().size(), tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    const GgufTensorInfo& info = (*f)->tensors()[i];
    EXPECT_EQ(info.name, tensors[i].name);
    EXPECT_EQ(info.type, tensors[i].type);
    EXPECT_EQ(info.shape, tensors[i].shape);
    EXPECT_EQ(info.num_bytes, tensors[i].data.size());
    EXPECT_EQ(info.offset % fmt.alignment, 0u);
    const uint8_t* p = (*f)->tensor_data(info);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % fmt.alignment, 0u) << "mmap base is page aligned";
    EXPECT_EQ(std::vector<uint8_t>(p, p + info.num_bytes), tensors[i].data) << info.name;
    EXPECT_EQ((*f)->find_tensor(info.name), &info);
  }
  EXPECT_EQ((*f)->find_tensor("missing"), nullptr);
}

INSTANTIATE_TEST_SUITE_P(Formats, WriterReader,
                         ::testing::Values(Format{3, 32}, Format{2, 32}, Format{3, 64},
                                           Format{2, 1}, Format{3, 4096}),
                         [](const auto& info) {
                           // Built with += : GCC 12 warns (-Wrestrict) on "v" + to_string().
                           std::string name = "v";
                           name += std::to_string(info.param.version);
                           name += "_align";
                           name += std::to_string(info.param.alignment);
                           return name;
                         });

class Getters : public ::testing::Test {
 protected:
  void SetUp() override {
    GgufWriter w;
    for (const GgufKv& kv : all_value_kinds()) w.set(kv.key, kv.value);
    w.set_string_array("strs", {"x", "", "yz"});
    w.set_f32_array("floats", {0.5f, -2.0f});
    w.set_i32_array("ints", {7, -7});
    w.set("big.u32s", GgufValue::array(GgufValueType::kUint32, {GgufValue::u32(4294967295u)}));
    w.set_u32("replaced", 1);
    w.set_u32("replaced", 2);  // replaces in place
    path_ = make_temp_dir() + "/getters.gguf";
    ASSERT_TRUE(w.write(path_).ok());
    auto f = GgufFile::open(path_);
    ASSERT_TRUE(f.ok()) << f.message();
    file_ = std::move(f).value();
  }
  std::string path_;
  std::unique_ptr<GgufFile> file_;
};

TEST_F(Getters, IntegersOfAnyWidthThatFitInt64) {
  EXPECT_EQ(*file_->get_int("u8"), 255);
  EXPECT_EQ(*file_->get_int("i8"), -128);
  EXPECT_EQ(*file_->get_int("u16"), 65535);
  EXPECT_EQ(*file_->get_int("i16"), -32768);
  EXPECT_EQ(*file_->get_int("u32"), 4294967295);
  EXPECT_EQ(*file_->get_int("i32"), -2147483648);
  EXPECT_EQ(*file_->get_int("i64"), INT64_MIN);
  EXPECT_EQ(*file_->get_int("replaced"), 2);
  auto too_big = file_->get_int("u64");
  ASSERT_FALSE(too_big.ok());
  EXPECT_EQ(too_big.message(),
            path_ + ": key 'u64': value 18446744073709551615 does not fit int64");
  auto wrong = file_->get_int("f32");
  ASSERT_FALSE(wrong.ok());
  EXPECT_EQ(wrong.message(), path_ + ": key 'f32': expected an integer, got f32");
  EXPECT_FALSE(file_->get_int("bool.true").ok());
  auto missing = file_->get_int("llama.block_count");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.message(), path_ + ": key 'llama.block_count': missing");
}

TEST_F(Getters, FloatsBoolsStrings) {
  EXPECT_EQ(*file_->get_float("f32"), double{-1.5e-7f});
  EXPECT_EQ(*file_->get_float("f64"), 3.141592653589793);
  EXPECT_FALSE(file_->get_float("u32").ok());
  EXPECT_TRUE(*file_->get_bool("bool.true"));
  EXPECT_FALSE(*file_->get_bool("bool.false"));
  EXPECT_FALSE(file_->get_bool("u8").ok());
  EXPECT_EQ(*file_->get_string("str"), std::string("h\xC3\xA9llo\0world", 12));
  EXPECT_EQ(*file_->get_string("str.empty"), "");
  auto not_str = file_->get_string("arr.u8");
  ASSERT_FALSE(not_str.ok());
  EXPECT_EQ(not_str.message(), path_ + ": key 'arr.u8': expected string, got array of u8");
}

TEST_F(Getters, Arrays) {
  EXPECT_EQ(*file_->get_string_array("strs"), (std::vector<std::string>{"x", "", "yz"}));
  EXPECT_EQ(*file_->get_float_array("floats"), (std::vector<float>{0.5f, -2.0f}));
  EXPECT_EQ(*file_->get_float_array("arr.f64"), (std::vector<float>{INFINITY, -0.25f}));
  EXPECT_TRUE(file_->get_float_array("arr.empty")->empty());
  EXPECT_EQ(*file_->get_int_array("ints"), (std::vector<int32_t>{7, -7}));
  EXPECT_EQ(*file_->get_int_array("arr.u8"), (std::vector<int32_t>{0, 200}));
  auto overflow = file_->get_int_array("big.u32s");
  ASSERT_FALSE(overflow.ok());
  EXPECT_EQ(overflow.message(),
            path_ + ": key 'big.u32s': element #0 value 4294967295 does not fit int32");
  EXPECT_FALSE(file_->get_string_array("ints").ok());
  EXPECT_FALSE(file_->get_int_array("nested.i32").ok());
  EXPECT_FALSE(file_->get_float_array("str").ok());
}

TEST(GgufFile, FileWithoutTensorsOrMetadataOpens) {
  const std::string path = make_temp_dir() + "/empty.gguf";
  ASSERT_TRUE(GgufWriter().write(path).ok());
  EXPECT_EQ(testing_util::read_bytes(path).size(), 24u);  // header only, no padding
  auto f = GgufFile::open(path);
  ASSERT_TRUE(f.ok()) << f.message();
  EXPECT_TRUE((*f)->metadata().empty());
  EXPECT_TRUE((*f)->tensors().empty());
}

TEST(GgufFile, OpenErrorsNameThePath) {
  const std::string dir = make_temp_dir();
  auto missing = GgufFile::open(dir + "/nope.gguf");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.message(), dir + "/nope.gguf: cannot open: No such file or directory");
  auto directory = GgufFile::open(dir);
  ASSERT_FALSE(directory.ok());
  EXPECT_EQ(directory.message(), dir + ": not a regular file");
  testing_util::write_bytes(dir + "/zero.gguf", {});
  auto zero = GgufFile::open(dir + "/zero.gguf");
  ASSERT_FALSE(zero.ok());
  EXPECT_EQ(zero.message(), dir + "/zero.gguf: header: magic runs past end of file (0 bytes)");
}

TEST(GgufWriter, FailsWithPathWhenDirectoryMissing) {
  const Status st = GgufWriter().write("/nonexistent-dir/x.gguf");
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("/nonexistent-dir/x.gguf: cannot create"), std::string::npos);
}

TEST(RealModel, Stories260KOpens) {
  const char* dir = std::getenv("KVW_TEST_MODELS");
  ASSERT_NE(dir, nullptr) << "KVW_TEST_MODELS not set (ctest sets it to tests/models)";
  auto f = GgufFile::open(std::string(dir) + "/stories260K.gguf");
  ASSERT_TRUE(f.ok()) << f.message();
  const GgufFile& m = **f;
  EXPECT_EQ(m.version(), 3u);
  EXPECT_EQ(*m.get_string("general.architecture"), "llama");
  EXPECT_EQ(*m.get_int("llama.block_count"), 5);
  EXPECT_EQ(*m.get_int("llama.embedding_length"), 64);
  EXPECT_EQ(*m.get_int("llama.attention.head_count_kv"), 4);
  EXPECT_NEAR(*m.get_float("llama.attention.layer_norm_rms_epsilon"), 1e-5, 1e-9);
  EXPECT_EQ(m.get_string_array("tokenizer.ggml.tokens")->size(), 512u);
  EXPECT_EQ(m.get_float_array("tokenizer.ggml.scores")->size(), 512u);
  EXPECT_EQ(m.get_int_array("tokenizer.ggml.token_type")->size(), 512u);
  ASSERT_EQ(m.tensors().size(), 48u);
  const GgufTensorInfo* emb = m.find_tensor("token_embd.weight");
  ASSERT_NE(emb, nullptr);
  EXPECT_EQ(emb->type, GgmlType::kF32);
  EXPECT_EQ(emb->shape, (std::vector<int64_t>{64, 512}));
  EXPECT_EQ(emb->num_bytes, 64u * 512u * 4u);
  // Weights are finite, small numbers (a trained model, not garbage from a bad offset).
  std::vector<float> row(64);
  dequantize_row(emb->type, m.tensor_data(*emb) + 64 * 4 * 100, row.data(), 64);
  for (float v : row) {
    EXPECT_TRUE(std::isfinite(v));
    EXPECT_LT(std::fabs(v), 10.0f);
  }
}

}  // namespace
}  // namespace kvw
