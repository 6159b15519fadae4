#include "core/thread_name.h"

#include <pthread.h>

namespace kvw {

void set_thread_name(const std::string& name) {
#ifdef __linux__
  pthread_setname_np(pthread_self(), name.substr(0, 15).c_str());
#else
  (void)name;
#endif
}

std::string thread_name() {
#ifdef __linux__
  char buf[16] = {};
  if (pthread_getname_np(pthread_self(), buf, sizeof buf) == 0) return buf;
#endif
  return "";
}

}  // namespace kvw
