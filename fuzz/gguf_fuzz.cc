// fuzz/gguf_fuzz.cc: the GGUF reader on arbitrary bytes. A file either opens (and every
// metadata value and tensor view is then readable) or is refused with an Error; never a crash,
// an out-of-bounds read or an allocation sized by an untrusted count.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <sstream>
#include <string>

#include "gguf/gguf_file.h"
#include "gguf/inspect.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // The reader maps a path; /dev/shm keeps this in memory.
  static const std::string path = "/dev/shm/kvw_gguf_fuzz_" + std::to_string(::getpid());
  FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) return 0;
  std::fwrite(data, 1, size, f);
  std::fclose(f);
  auto file = kvw::GgufFile::open(path);
  if (file.ok()) {
    std::ostringstream out;
    kvw::print_inspect(**file, out);  // walks every key, value and tensor
  }
  return 0;
}
