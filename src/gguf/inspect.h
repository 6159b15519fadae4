// gguf/inspect.h: human-readable dump of a GGUF file (`kvwarden inspect FILE`), like gguf-dump:
// header facts, a metadata table and a tensor table with totals.
// Stateless free functions; safe to call from any thread.
#pragma once

#include <cstddef>
#include <ostream>
#include <string>

#include "core/status.h"
#include "gguf/gguf_file.h"
#include "gguf/gguf_value.h"

namespace kvw {

// One value as text: strings quoted and escaped, arrays as [a, b, c, ... (N items)] showing at
// most max_items elements per (nested) array.
std::string format_gguf_value(const GgufValue& v, size_t max_items = 8);

// Opens `path` and prints it; the error is GgufFile::open's (names the file and the field).
Status print_inspect(const std::string& path, std::ostream& out);
void print_inspect(const GgufFile& file, std::ostream& out);

}  // namespace kvw
