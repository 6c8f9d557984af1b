#pragma once
/// \file test_point_pause.h
/// \brief A test holding one thread at a named test point (reft/test_point.h) while it moves the
/// rest of the system, then letting it go on.

#include <chrono>
#include <condition_variable>
#include <memory>
#include <string>

#include "reft/mutex.h"
#include "reft/test_point.h"

namespace reft::test_point {

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
