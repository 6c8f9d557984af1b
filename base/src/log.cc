#include "reft/log.h"

#include <atomic>
#include <cstdio>

namespace reft {

namespace {

void StderrSink(LogLevel level, const std::string& line) {
  const char* tag = level == LogLevel::kError     ? "error"
                    : level == LogLevel::kWarning ? "warning"
                                                  : "info";
  std::fprintf(stderr, "reft %s: %s\n", tag, line.c_str());
}

std::atomic<LogSink> g_sink{&StderrSink};

void Emit(LogLevel level, const std::string& line) { g_sink.load()(level, line); }

}  // namespace

void SetLogSink(LogSink sink) { g_sink.store(sink != nullptr ? sink : &StderrSink); }

void LogInfo(const std::string& line) { Emit(LogLevel::kInfo, line); }
void LogWarning(const std::string& line) { Emit(LogLevel::kWarning, line); }
void LogError(const std::string& line) { Emit(LogLevel::kError, line); }

}  // namespace reft
