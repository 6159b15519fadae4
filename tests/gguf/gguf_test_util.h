// Helpers shared by the gguf tests: a per-test temporary directory and raw byte access to
// files, so tests can write a valid file with GgufWriter and then corrupt it.
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <string_view>
#include <vector>

namespace kvw::testing_util {

// A fresh directory under testing::TempDir(), unique per call.
inline std::string make_temp_dir() {
  std::string tmpl = ::testing::TempDir() + "kvw_gguf_XXXXXX";
  char* dir = mkdtemp(tmpl.data());
  EXPECT_NE(dir, nullptr) << tmpl;
  return tmpl;
}

inline std::vector<uint8_t> read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

inline void write_bytes(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
}

// Offset of the first occurrence of `needle`; fails the test if absent.
inline size_t find_bytes(const std::vector<uint8_t>& hay, std::string_view needle) {
  for (size_t i = 0; i + needle.size() <= hay.size(); ++i) {
    if (std::memcmp(hay.data() + i, needle.data(), needle.size()) == 0) return i;
  }
  ADD_FAILURE() << "'" << needle << "' not found";
  return 0;
}

template <typename T>
void poke(std::vector<uint8_t>& bytes, size_t offset, T value) {
  ASSERT_LE(offset + sizeof value, bytes.size());
  std::memcpy(bytes.data() + offset, &value, sizeof value);
}

template <typename T>
T peek(const std::vector<uint8_t>& bytes, size_t offset) {
  T value{};
  EXPECT_LE(offset + sizeof value, bytes.size());
  if (offset + sizeof value <= bytes.size())
    std::memcpy(&value, bytes.data() + offset, sizeof value);
  return value;
}

}  // namespace kvw::testing_util
