#include "logging.h"

#include <unistd.h>

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

namespace reft::app {

void SetupLogging(const std::string& level) {
  auto logger = spdlog::stderr_color_mt("reftd");
  // Under systemd (JOURNAL_STREAM set) journald stamps the time itself.
  if (getenv("JOURNAL_STREAM")) logger->set_pattern("[%l] %v");
  else logger->set_pattern("%Y-%m-%dT%H:%M:%S.%e [%l] %v");
  spdlog::set_default_logger(logger);
  spdlog::set_level(spdlog::level::from_str(level));
}

}  // namespace reft::app
