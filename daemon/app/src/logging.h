#pragma once
#include <string>

namespace reft::app {
/// \brief Configures spdlog: stderr sink (journald adds timestamps), level from config.
void SetupLogging(const std::string& level);
}  // namespace reft::app
