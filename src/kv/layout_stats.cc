#include "kv/layout_stats.h"

namespace kvw {

RunSummary summarize_runs(std::span<const uint8_t> is_free) {
  RunSummary s;
  uint32_t run = 0;
  for (uint8_t f : is_free) {
    if (f != 0) {
      if (run == 0) ++s.num_runs;
      ++run;
      if (run > s.largest_run) s.largest_run = run;
    } else {
      run = 0;
    }
  }
  return s;
}

}  // namespace kvw
