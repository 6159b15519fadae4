// core/thread_name.h: names the calling thread so that `top -H`, perf, gdb and /proc show who
// burns the CPU (kvw-io-0, kvw-engine, kvw-fwd-1, kvw-http, kvw-swap, ...).
#pragma once

#include <string>

namespace kvw {

// Linux keeps the first 15 bytes; longer names are cut there. No-op where unsupported.
void set_thread_name(const std::string& name);
// The calling thread's name ("" where unsupported).
std::string thread_name();

}  // namespace kvw
