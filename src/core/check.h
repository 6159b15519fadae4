// core/check.h: CHECK for broken invariants (aborts, also in release), DCHECK for costly ones.
// Usage: CHECK(ref_count > 0) << "block " << id;   The message is built only on failure.
#pragma once

#include <sstream>

namespace kvw::internal {

class CheckFailure {
 public:
  CheckFailure(const char* file, int line, const char* cond);
  [[noreturn]] ~CheckFailure();
  template <typename T>
  CheckFailure& operator<<(const T& v) {
    os_ << v;
    return *this;
  }

 private:
  std::ostringstream os_;
};

// Lets the macro below be a single expression with a streamable tail.
struct Voidify {
  void operator&(const CheckFailure&) {}
};

}  // namespace kvw::internal

#define CHECK(cond) \
  (cond) ? (void)0  \
         : ::kvw::internal::Voidify() & ::kvw::internal::CheckFailure(__FILE__, __LINE__, #cond)

#ifdef NDEBUG
#define DCHECK(cond) \
  while (false) CHECK(cond)
#else
#define DCHECK(cond) CHECK(cond)
#endif
