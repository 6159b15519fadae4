#include "core/log.h"

#include <atomic>
#include <cstdio>

namespace kvw {
namespace {
std::atomic<LogLevel> g_level{LogLevel::kInfo};
const char* level_name(LogLevel l) {
  switch (l) {
    case LogLevel::kError:
      return "error";
    case LogLevel::kWarn:
      return "warn";
    case LogLevel::kInfo:
      return "info";
    case LogLevel::kDebug:
      return "debug";
  }
  return "?";
}
}  // namespace

LogLevel log_level() {
  return g_level.load(std::memory_order_relaxed);
}
void set_log_level(LogLevel level) {
  g_level.store(level, std::memory_order_relaxed);
}

LogLine::LogLine(LogLevel level, const char* tag) {
  os_ << "[" << level_name(level) << " " << tag << "] ";
}

LogLine::~LogLine() {
  os_ << "\n";
  std::fputs(os_.str().c_str(), stderr);
}

}  // namespace kvw
