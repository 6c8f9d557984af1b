#pragma once
/// \file mutex.h
/// \brief reft::Mutex and reft::MutexLock: std::mutex and std::unique_lock with the Clang
/// thread-safety annotations of thread_annotations.h (libstdc++'s own types carry none, so the
/// analysis cannot see through them).

#include <chrono>
#include <condition_variable>
#include <mutex>

#include "reft/thread_annotations.h"

namespace reft {

/// \brief A std::mutex the thread-safety analysis knows about. Same cost and semantics.
class REFT_CAPABILITY("mutex") Mutex {
 public:
  Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;

  void lock() REFT_ACQUIRE() { mu_.lock(); }
  void unlock() REFT_RELEASE() { mu_.unlock(); }
  bool try_lock() REFT_TRY_ACQUIRE(true) { return mu_.try_lock(); }

 private:
  friend class MutexLock;
  std::mutex mu_;
};

/// \brief Holds a Mutex from construction to destruction (std::unique_lock underneath, so it
/// can wait on a std::condition_variable). Unlock()/Lock() release and take it again inside
/// the scope.
class REFT_SCOPED_CAPABILITY MutexLock {
 public:
  explicit MutexLock(Mutex& mu) REFT_ACQUIRE(mu) : lock_(mu.mu_) {}
  ~MutexLock() REFT_RELEASE() {}
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

  void Unlock() REFT_RELEASE() { lock_.unlock(); }
  void Lock() REFT_ACQUIRE() { lock_.lock(); }

  // The waits release the mutex while blocked and hold it again when they return, which the
  // analysis cannot express; a predicate that reads guarded state is declared
  // `[&]() REFT_REQUIRES(mu_) { ... }` and is checked as such.
  void Wait(std::condition_variable& cv) REFT_NO_THREAD_SAFETY_ANALYSIS { cv.wait(lock_); }
  template <typename Predicate>
  void Wait(std::condition_variable& cv, Predicate pred) REFT_NO_THREAD_SAFETY_ANALYSIS {
    cv.wait(lock_, pred);
  }
  /// \return the predicate's value when the wait ended (false: timed out).
  template <typename Rep, typename Period, typename Predicate>
  bool WaitFor(std::condition_variable& cv, std::chrono::duration<Rep, Period> timeout,
               Predicate pred) REFT_NO_THREAD_SAFETY_ANALYSIS {
    return cv.wait_for(lock_, timeout, pred);
  }
  template <typename Clock, typename Duration, typename Predicate>
  bool WaitUntil(std::condition_variable& cv, std::chrono::time_point<Clock, Duration> deadline,
                 Predicate pred) REFT_NO_THREAD_SAFETY_ANALYSIS {
    return cv.wait_until(lock_, deadline, pred);
  }
  /// \return std::cv_status::timeout when the deadline passed.
  template <typename Clock, typename Duration>
  std::cv_status WaitUntil(std::condition_variable& cv,
                           std::chrono::time_point<Clock, Duration> deadline)
      REFT_NO_THREAD_SAFETY_ANALYSIS {
    return cv.wait_until(lock_, deadline);
  }

 private:
  std::unique_lock<std::mutex> lock_;
};

}  // namespace reft
