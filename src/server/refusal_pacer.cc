#include "server/refusal_pacer.h"

#include <algorithm>

namespace kvw::server {

double refusal_hold_s(const RefusalPacing& cfg, double early_s) {
  if (!(cfg.hold_s > 0) || !(early_s > 0)) return 0;
  return std::min(cfg.hold_s, early_s);
}

}  // namespace kvw::server
