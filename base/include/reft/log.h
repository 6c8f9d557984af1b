#pragma once
/// \file log.h
/// \brief Where library code reports a failure that no caller can receive: a background
/// commit, a cleanup, a best-effort release. reftd routes these lines to its logger
/// (daemon/app/src/logging.cc); by default they go to stderr. libreft returns every error to
/// its caller instead and never logs (it prints nothing inside a trainer).

#include <string>

namespace reft {

enum class LogLevel { kInfo, kWarning, kError };

/// \brief Receives one line (no trailing newline). Must be thread-safe.
using LogSink = void (*)(LogLevel level, const std::string& line);

/// \brief Replaces the sink (nullptr restores the default). Call before starting threads.
void SetLogSink(LogSink sink);

void LogInfo(const std::string& line);
void LogWarning(const std::string& line);
void LogError(const std::string& line);

}  // namespace reft
