#pragma once
/// \file test_point.h
/// \brief Named test points: places in product code where a test stops one thread (or one
/// reftd process) to open a race at its exact point, instead of hoping a sleep lands there.
///
/// Product code marks a point with `reft::test_point::Reach(kSomePoint, job, this)`; the point's
/// name is a constant next to the code that reaches it, with a comment saying exactly where the
/// process stops. When nothing is armed a Reach costs one relaxed atomic load.
///
/// Two ways to arm points (docs/architecture.md "Named test points"):
/// - in-process, by a unit test: `ScopedHook` installs a function called on every arrival
///   (tests/support's `Pause` is the usual one: it holds the first matching arrival until the
///   test releases it);
/// - in a real reftd, from the environment read at the first Reach:
///   `REFT_TEST_PAUSE_AT=<point>[,<point>...]` and `REFT_TEST_PAUSE_DIR=<dir>`. On reaching an
///   armed point the process creates the FIFO `<dir>/<point>.resume`, writes
///   `<dir>/<point>.reached` (its pid and the job) and blocks opening the FIFO for reading. The
///   test waits for `.reached` to appear (inotify), removes it (so that the next arrival writes
///   it anew) and releases the process by opening the FIFO for writing.

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "reft/mutex.h"

namespace reft::test_point {

/// One arrival at a point: which point, the job it works for ("" when none) and the object
/// that reached it (so a test with several nodes in one process stops one node only).
struct Arrival {
  std::string_view point;
  std::string_view job;
  const void* who = nullptr;
};
using Hook = std::function<void(const Arrival&)>;

namespace internal {
/// Nonzero while something may be armed (before the environment was read, or a hook or an
/// environment point is set).
extern std::atomic<uint8_t> g_maybe_armed;
void Arrive(const Arrival& arrival);
}  // namespace internal

/// \brief Marks point `point` (a constant) reached by `who` working for `job`; blocks while a
/// test holds it there.
inline void Reach(const char* point, std::string_view job = {}, const void* who = nullptr) {
  if (internal::g_maybe_armed.load(std::memory_order_relaxed) != 0) {
    internal::Arrive(Arrival{point, job, who});
  }
}

/// \brief Calls `hook` on every arrival (on the arriving thread, with no lock of the caller's
/// known to it) while it lives; the previous hook comes back when it goes. One at a time.
class ScopedHook {
 public:
  explicit ScopedHook(Hook hook);
  ~ScopedHook();
  ScopedHook(const ScopedHook&) = delete;
  ScopedHook& operator=(const ScopedHook&) = delete;

 private:
  std::shared_ptr<const Hook> previous_;
};

}  // namespace reft::test_point
