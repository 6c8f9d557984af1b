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
///   (`Pause` is the usual one: it holds the first matching arrival until the test releases it);
/// - in a real reftd, from the environment read at the first Reach:
///   `REFT_TEST_PAUSE_AT=<point>[,<point>...]` and `REFT_TEST_PAUSE_DIR=<dir>`. On reaching an
///   armed point the process creates the FIFO `<dir>/<point>.resume`, writes
///   `<dir>/<point>.reached` (its pid and the job) and blocks opening the FIFO for reading. The
///   test waits for `.reached` to appear (inotify), removes it (so that the next arrival writes
///   it anew) and releases the process by opening the FIFO for writing.

#include <atomic>
#include <chrono>
#include <condition_variable>
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

/// \brief Holds the first arrival at `point` for `job` (by `who`, when given) until Release(),
/// or until the Pause goes (a failed REQUIRE must not leave the thread blocked); later
/// arrivals pass. Declare it after the objects whose threads it may hold.
class Pause {
 public:
  Pause(std::string point, std::string job, const void* who = nullptr);
  ~Pause();
  Pause(const Pause&) = delete;
  Pause& operator=(const Pause&) = delete;

  /// True once a thread is held at the point (false when none came within `timeout`).
  bool WaitHeld(std::chrono::milliseconds timeout);
  /// Lets the held thread (and any later one) go on.
  void Release();

 private:
  struct State {
    Mutex mu;
    std::condition_variable cv;
    bool held REFT_GUARDED_BY(mu) = false;
    bool released REFT_GUARDED_BY(mu) = false;
  };
  std::shared_ptr<State> state_;
  std::unique_ptr<ScopedHook> hook_;
};

}  // namespace reft::test_point
