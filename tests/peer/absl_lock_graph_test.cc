// Abseil's debug-only deadlock detector is off in reftd (DisableAbslLockGraph): Debian builds
// Abseil without NDEBUG, so the detector runs on every absl::Mutex gRPC takes, and a lock-order
// cycle it believes it saw aborts the process. A test process of its own: the mode is
// process-wide.
#include <absl/synchronization/mutex.h>

#include <catch2/catch.hpp>

#include "reft/peer/peer_options.h"

TEST_CASE("absl mutexes taken in both orders do not abort once the lock graph is off", "[peer]") {
  reft::peer::DisableAbslLockGraph();
  // With the detector on (Debian's default) the second block is reported as a potential
  // deadlock and the process dies (SIGABRT): this test then fails by crashing.
  absl::Mutex a, b;
  {
    absl::MutexLock la(&a);
    absl::MutexLock lb(&b);
  }
  {
    absl::MutexLock lb(&b);
    absl::MutexLock la(&a);
  }
  SUCCEED("no abort");
}
