#include "core/huge_page_usage.h"

#include <algorithm>
#include <charconv>
#include <fstream>
#include <sstream>
#include <string>

namespace kvw {
namespace {

constexpr uint64_t kHuge = uint64_t{2} << 20;

// A mapping's header line, "7f12a0000000-7f12a4000000 rw-p 00000000 00:00 0 [heap]".
bool parse_header(std::string_view line, uintptr_t* lo, uintptr_t* hi) {
  const char* s = line.data();
  const char* e = s + line.size();
  auto r1 = std::from_chars(s, e, *lo, 16);
  if (r1.ec != std::errc() || r1.ptr == e || *r1.ptr != '-') return false;
  auto r2 = std::from_chars(r1.ptr + 1, e, *hi, 16);
  return r2.ec == std::errc() && r2.ptr != e && *r2.ptr == ' ' && *lo <= *hi;
}

// "AnonHugePages:      4096 kB" -> bytes, when `line` is one of the huge-page fields.
std::optional<uint64_t> huge_field_bytes(std::string_view line) {
  const size_t colon = line.find(':');
  if (colon == std::string_view::npos) return std::nullopt;
  const std::string_view key = line.substr(0, colon);
  if (key != "AnonHugePages" && key != "ShmemPmdMapped" && key != "FilePmdMapped") {
    return std::nullopt;
  }
  std::string_view rest = line.substr(colon + 1);
  rest.remove_prefix(std::min(rest.find_first_not_of(' '), rest.size()));
  uint64_t kb = 0;
  auto r = std::from_chars(rest.data(), rest.data() + rest.size(), kb);
  if (r.ec != std::errc() || std::string_view(r.ptr, rest.data() + rest.size()) != " kB") {
    return std::nullopt;
  }
  return kb * 1024;
}

// The 2 MiB-aligned 2 MiB blocks wholly inside [lo, hi): the most huge pages it can hold.
uint64_t aligned_huge_bytes(uintptr_t lo, uintptr_t hi) {
  const uint64_t first = (lo + kHuge - 1) / kHuge, last = hi / kHuge;
  return last > first ? (last - first) * kHuge : 0;
}

}  // namespace

uint64_t huge_page_bytes_in_smaps(std::string_view smaps, uintptr_t begin, uintptr_t end) {
  uint64_t total = 0;
  uint64_t in_mapping = 0;  // huge bytes of the current mapping
  uint64_t cap = 0;         // what the current mapping may contribute; 0: outside the range
  while (!smaps.empty()) {
    const size_t nl = smaps.find('\n');
    const std::string_view line = smaps.substr(0, nl);
    smaps.remove_prefix(nl == std::string_view::npos ? smaps.size() : nl + 1);
    uintptr_t lo = 0, hi = 0;
    if (parse_header(line, &lo, &hi)) {
      total += std::min(in_mapping, cap);
      in_mapping = 0;
      cap = std::max(lo, begin) < std::min(hi, end)
                ? aligned_huge_bytes(std::max(lo, begin), std::min(hi, end))
                : 0;
    } else if (cap > 0) {
      if (auto b = huge_field_bytes(line)) in_mapping += *b;
    }
  }
  return total + std::min(in_mapping, cap);
}

std::optional<uint64_t> huge_page_bytes(const void* p, uint64_t len) {
  std::ifstream in("/proc/self/smaps");
  if (!in) return std::nullopt;
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) return std::nullopt;
  const auto begin = reinterpret_cast<uintptr_t>(p);
  return huge_page_bytes_in_smaps(text.str(), begin, begin + len);
}

}  // namespace kvw
