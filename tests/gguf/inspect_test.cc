// Tests for gguf/inspect: value formatting and the full `kvwarden inspect` text of a generated
// file, plus the real model when KVW_TEST_MODELS is set.

#include "gguf/inspect.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <sstream>

#include "gguf/gguf_writer.h"
#include "gguf_test_util.h"

namespace kvw {
namespace {

using ::testing::HasSubstr;

TEST(FormatGgufValue, ScalarsStringsAndArrays) {
  EXPECT_EQ(format_gguf_value(GgufValue::u32(7)), "7");
  EXPECT_EQ(format_gguf_value({GgufValueType::kInt64, int64_t{-3}}), "-3");
  EXPECT_EQ(format_gguf_value(GgufValue::f32(0.5f)), "0.5");
  EXPECT_EQ(format_gguf_value(GgufValue::boolean(true)), "true");
  EXPECT_EQ(format_gguf_value(GgufValue::str("a\"b\\c\n\x01")), "\"a\\\"b\\\\c\\n\\x01\"");
  EXPECT_EQ(format_gguf_value(GgufValue::str(std::string(100, 'x'))),
            "\"" + std::string(64, 'x') + "\"... (100 bytes)");
  std::vector<GgufValue> items;
  for (int i = 0; i < 10; ++i) items.push_back(GgufValue::i32(i));
  const GgufValue arr = GgufValue::array(GgufValueType::kInt32, items);
  EXPECT_EQ(format_gguf_value(arr, 3), "[0, 1, 2, ... (10 items)]");
  EXPECT_EQ(format_gguf_value(arr, 0), "[... (10 items)]");
  EXPECT_EQ(format_gguf_value(GgufValue::array(GgufValueType::kInt32, {})), "[]");
  const GgufValue nested =
      GgufValue::array(GgufValueType::kArray,
                       {GgufValue::array(GgufValueType::kString, {GgufValue::str("a")}), arr});
  EXPECT_EQ(format_gguf_value(nested, 2), "[[\"a\"], [0, 1, ... (10 items)]]");
}

TEST(PrintInspect, GeneratedFileTables) {
  GgufWriter w(3, 64);
  w.set_string("general.architecture", "llama");
  w.set_u32("llama.block_count", 2);
  std::vector<std::string> tokens;
  for (int i = 0; i < 100; ++i) tokens.push_back(std::to_string(i).insert(0, 1, 't'));
  w.set_string_array("tokenizer.ggml.tokens", tokens);
  w.add_tensor("tok", GgmlType::kF16, {4, 3}, std::vector<uint8_t>(24));
  w.add_tensor("blk.0.w", GgmlType::kQ8_0, {32, 2}, std::vector<uint8_t>(68));
  const std::string path = testing_util::make_temp_dir() + "/m.gguf";
  ASSERT_TRUE(w.write(path).ok());

  std::ostringstream out;
  ASSERT_TRUE(print_inspect(path, out).ok());
  const std::string text = out.str();
  const size_t size = testing_util::read_bytes(path).size();
  EXPECT_THAT(text,
              HasSubstr(path + ": GGUF v3, alignment 64, " + std::to_string(size) + " bytes\n"));
  EXPECT_THAT(text, HasSubstr("metadata: 4 keys\n"));
  EXPECT_THAT(text, HasSubstr("    0  general.architecture   string      \"llama\"\n"));
  EXPECT_THAT(text, HasSubstr("    1  llama.block_count      u32         2\n"));
  EXPECT_THAT(text, HasSubstr("    2  tokenizer.ggml.tokens  [string]    [\"t0\", \"t1\", \"t2\", "
                              "\"t3\", \"t4\", \"t5\", \"t6\", \"t7\", ... (100 items)]\n"));
  EXPECT_THAT(text, HasSubstr("    3  general.alignment      u32         64\n"));
  EXPECT_THAT(text, HasSubstr("tensors: 2\n"));
  EXPECT_THAT(text, HasSubstr("    0  tok      f16    [4, 3]             24             0\n"));
  EXPECT_THAT(text, HasSubstr("    1  blk.0.w  q8_0   [32, 2]            68            64\n"));
  EXPECT_THAT(text, HasSubstr("totals: 2 tensors, 76 elements, 92 bytes of tensor data\n"));
}

TEST(PrintInspect, ErrorComesFromOpen) {
  const std::string path = testing_util::make_temp_dir() + "/bad.gguf";
  testing_util::write_bytes(path, {'G', 'G', 'U', 'X', 3, 0, 0, 0});
  std::ostringstream out;
  const Status st = print_inspect(path, out);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.message(), path + ": header: bad magic 'GGUX' (expected 'GGUF')");
  EXPECT_EQ(out.str(), "");
}

TEST(PrintInspect, RealModel) {
  const char* dir = std::getenv("KVW_TEST_MODELS");
  ASSERT_NE(dir, nullptr) << "KVW_TEST_MODELS not set (ctest sets it to tests/models)";
  std::ostringstream out;
  ASSERT_TRUE(print_inspect(std::string(dir) + "/stories260K.gguf", out).ok());
  EXPECT_THAT(out.str(), HasSubstr("GGUF v3, alignment 32, 1185376 bytes"));
  EXPECT_THAT(out.str(), HasSubstr("metadata: 19 keys"));
  EXPECT_THAT(out.str(), HasSubstr("llama.block_count"));
  EXPECT_THAT(out.str(), HasSubstr("... (512 items)]"));
  EXPECT_THAT(out.str(), HasSubstr("totals: 48 tensors, 292800 elements, 1171200 bytes"));
}

}  // namespace
}  // namespace kvw
