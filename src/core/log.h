// core/log.h: leveled, tagged logging to stderr. The level is checked before any formatting,
// so a disabled LOG(DEBUG, ...) costs one comparison.
// Usage: LOG(INFO, model) << "loaded " << n << " tensors";
#pragma once

#include <sstream>

namespace kvw {

enum class LogLevel { kError = 0, kWarn = 1, kInfo = 2, kDebug = 3 };

LogLevel log_level();
void set_log_level(LogLevel level);

class LogLine {
 public:
  LogLine(LogLevel level, const char* tag);
  ~LogLine();
  template <typename T>
  LogLine& operator<<(const T& v) {
    os_ << v;
    return *this;
  }

 private:
  std::ostringstream os_;
};

}  // namespace kvw

#define KVW_LOG_LEVEL_ERROR ::kvw::LogLevel::kError
#define KVW_LOG_LEVEL_WARN ::kvw::LogLevel::kWarn
#define KVW_LOG_LEVEL_INFO ::kvw::LogLevel::kInfo
#define KVW_LOG_LEVEL_DEBUG ::kvw::LogLevel::kDebug
#define LOG(level, tag)                             \
  if (KVW_LOG_LEVEL_##level > ::kvw::log_level()) { \
  } else                                            \
    ::kvw::LogLine(KVW_LOG_LEVEL_##level, #tag)
