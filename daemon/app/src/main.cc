// reftd: the per-node checkpoint agent. Composition root only: parse the configuration, start
// the daemon, wait for a signal, shut down. Exit status (docs/protocol.md "reftd"): 0 clean shutdown,
// 2 usage or config error (one line on stderr), 1 runtime failure.
#include <signal.h>

#include <algorithm>
#include <cstdio>
#include <ctime>

#include <spdlog/spdlog.h>

#include "logging.h"
#include "config.h"
#include "daemon.h"
#include "notify.h"
#include "reft/peer/peer_options.h"

namespace {

// Signals are blocked before any thread starts so that every thread inherits the mask and
// only the main thread receives them through sigtimedwait.
sigset_t BlockShutdownSignals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  signal(SIGPIPE, SIG_IGN);  // a trainer or peer hanging up must not kill the daemon
  return set;
}

}  // namespace

int main(int argc, char** argv) {
  // Before any thread exists: keeps glibc from returning gRPC's ~1 MiB receive buffers to the
  // kernel after every read, which made shard streaming 7-10x slower (docs/bench/peer.md).
  reft::peer::TuneMallocForPeerStreams();
  reft::peer::DisableAbslLockGraph();
  sigset_t signals = BlockShutdownSignals();
  auto config = reft::app::ParseDaemonArgs(argc, argv);
  if (!config.ok()) {
    if (config.status().code() == reft::StatusCode::kCancelled) {  // --help / --version
      std::fputs(config.status().message().c_str(), stdout);
      std::fputs("\n", stdout);
      return 0;
    }
    std::fprintf(stderr, "reftd: %s\n", config.status().message().c_str());
    return 2;
  }
  reft::app::SetupLogging(config->log_level);
  // What one restore holds in flight: each fetch worker's piece and the message carrying it.
  reft::peer::WarmHeap(std::min<uint64_t>(
      2 * static_cast<uint64_t>(config->restore_concurrency) * config->restore_piece_bytes,
      256ull << 20));

  auto daemon = reft::app::Daemon::Create(*config);
  if (!daemon.ok()) {
    spdlog::critical("{}", daemon.status().ToString());
    return 1;
  }
  if (auto st = (*daemon)->Start(); !st.ok()) {
    spdlog::critical("start failed: {}", st.ToString());
    (*daemon)->Shutdown();
    return 1;
  }

  // Ping the watchdog at half its interval while waiting for a shutdown signal.
  auto watchdog = reft::app::WatchdogInterval();
  auto tick = watchdog.count() > 0 ? watchdog / 2 : std::chrono::microseconds(1000000);
  for (;;) {
    timespec ts{static_cast<time_t>(tick.count() / 1000000),
                static_cast<long>((tick.count() % 1000000) * 1000)};
    int sig = sigtimedwait(&signals, nullptr, &ts);
    if (sig == SIGTERM || sig == SIGINT) {
      spdlog::info("received {}, shutting down", sig == SIGTERM ? "SIGTERM" : "SIGINT");
      break;
    }
    if (sig == SIGHUP) spdlog::info("SIGHUP: configuration reload is not supported; ignored");
    if (watchdog.count() > 0) reft::app::NotifyWatchdog();
  }
  reft::app::NotifyStopping();
  (*daemon)->Shutdown();
  spdlog::info("stopped");
  return 0;
}
