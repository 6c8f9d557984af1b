#include "logging.h"

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include "reft/log.h"

namespace reft::app {

namespace {

// What the daemon's libraries report without a caller (reft/log.h) goes to the same log.
void ToSpdlog(LogLevel level, const std::string& line) {
  switch (level) {
    case LogLevel::kError:
      spdlog::error("{}", line);
      break;
    case LogLevel::kWarning:
      spdlog::warn("{}", line);
      break;
    case LogLevel::kInfo:
      spdlog::info("{}", line);
      break;
  }
}

}  // namespace

void SetupLogging(const std::string& level) {
  auto logger = spdlog::stderr_color_mt("reftd");
  // Under systemd (JOURNAL_STREAM set) journald stamps the time itself.
  if (getenv("JOURNAL_STREAM")) logger->set_pattern("[%l] %v");
  else logger->set_pattern("%Y-%m-%dT%H:%M:%S.%e [%l] %v");
  spdlog::set_default_logger(logger);
  spdlog::set_level(spdlog::level::from_str(level));
  SetLogSink(&ToSpdlog);
}

}  // namespace reft::app
