#pragma once
/// \file notify.h
/// \brief Readiness, watchdog and stopping notifications to systemd (no-ops when not under
/// systemd, i.e. NOTIFY_SOCKET unset).

#include <chrono>
#include <string>

namespace reft::app {

void NotifyReady(const std::string& status);
void NotifyStopping();
void NotifyWatchdog();
/// \brief The watchdog interval systemd expects pings within (WatchdogSec), or zero.
std::chrono::microseconds WatchdogInterval();

}  // namespace reft::app
