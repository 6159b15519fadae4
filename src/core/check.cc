#include "core/check.h"

#include <cstdio>
#include <cstdlib>

namespace kvw::internal {

CheckFailure::CheckFailure(const char* file, int line, const char* cond) {
  os_ << file << ":" << line << ": CHECK failed: " << cond << " ";
}

CheckFailure::~CheckFailure() {
  std::fprintf(stderr, "%s\n", os_.str().c_str());
  std::fflush(stderr);
  std::abort();
}

}  // namespace kvw::internal
