#pragma once
/// \file thread.h
/// \brief reft::Thread and reft::Async: std::thread and std::async(std::launch::async) whose
/// thread names itself (pthread_setname_np) before it runs the function, so that top -H, gdb,
/// perf and /proc/<pid>/task/*/comm tell reftd's threads apart.
///
/// Names start with "reft-" (e.g. "reft-etcd-watch"); the kernel keeps at most 15 characters.
/// A string literal name is checked at compile time; a name built at run time (a worker's
/// index) is cut to 15 characters. Like std::thread, a Thread is never detached: destroying
/// one that is still joinable terminates the process, so its owner joins it.

#include <pthread.h>

#include <array>
#include <cstddef>
#include <future>
#include <string>
#include <thread>
#include <utility>

namespace reft {

namespace thread_internal {

/// The longest name the kernel keeps (TASK_COMM_LEN - 1).
constexpr size_t kMaxName = 15;
using Name = std::array<char, kMaxName + 1>;

inline Name Truncated(const char* name) {
  Name out{};
  for (size_t i = 0; i < kMaxName && name[i] != '\0'; ++i) out[i] = name[i];
  return out;
}

/// `fn` run on the calling thread after naming it `name`.
template <typename Fn>
auto Named(Name name, Fn&& fn) {
  return [name, fn = std::forward<Fn>(fn)]() mutable {
    pthread_setname_np(pthread_self(), name.data());
    return fn();
  };
}

}  // namespace thread_internal

class Thread {
 public:
  Thread() = default;
  /// Starts `fn()` on a new thread named `name`.
  template <size_t N, typename Fn>
  Thread(const char (&name)[N], Fn&& fn)
      : thread_(thread_internal::Named(thread_internal::Truncated(name), std::forward<Fn>(fn))) {
    static_assert(N - 1 <= thread_internal::kMaxName, "a thread name has at most 15 characters");
  }
  /// A name built at run time: cut to its first 15 characters.
  template <typename Fn>
  Thread(const std::string& name, Fn&& fn)
      : thread_(thread_internal::Named(thread_internal::Truncated(name.c_str()),
                                       std::forward<Fn>(fn))) {}

  Thread(Thread&&) noexcept = default;
  Thread& operator=(Thread&&) noexcept = default;

  bool joinable() const { return thread_.joinable(); }
  void join() { thread_.join(); }
  std::thread::id get_id() const { return thread_.get_id(); }

 private:
  std::thread thread_;
};

/// \brief std::async(std::launch::async, fn) on a thread named `name`: the future's
/// destructor waits for `fn` as std::async's does.
template <size_t N, typename Fn>
auto Async(const char (&name)[N], Fn&& fn) {
  static_assert(N - 1 <= thread_internal::kMaxName, "a thread name has at most 15 characters");
  return std::async(std::launch::async,
                    thread_internal::Named(thread_internal::Truncated(name), std::forward<Fn>(fn)));
}

}  // namespace reft
