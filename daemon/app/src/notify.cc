#include "notify.h"

#include <systemd/sd-daemon.h>
#include <unistd.h>

namespace reft::app {

void NotifyReady(const std::string& status) {
  sd_notifyf(0, "READY=1\nSTATUS=%s\nMAINPID=%d", status.c_str(), static_cast<int>(getpid()));
}

void NotifyStopping() { sd_notify(0, "STOPPING=1"); }

void NotifyWatchdog() { sd_notify(0, "WATCHDOG=1"); }

std::chrono::microseconds WatchdogInterval() {
  uint64_t usec = 0;
  if (sd_watchdog_enabled(0, &usec) > 0) return std::chrono::microseconds(usec);
  return std::chrono::microseconds(0);
}

}  // namespace reft::app
