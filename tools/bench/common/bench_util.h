// What every bench in tools/bench needs and nothing else provides: timing a call, the median
// and best of repetitions, and exiting with the bench's name and the failed Status.
#pragma once

#include <errno.h>  // program_invocation_short_name (glibc)

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "reft/status.h"

namespace reft::bench {

/// Wall-clock seconds `f()` takes.
template <typename F>
double SecondsOf(F&& f) {
  const auto t0 = std::chrono::steady_clock::now();
  std::forward<F>(f)();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

/// Seconds since `t0`.
inline double SecondsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

/// Upper median of a non-empty sample.
inline double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

/// Fastest of a non-empty sample.
inline double Best(const std::vector<double>& v) { return *std::min_element(v.begin(), v.end()); }

[[noreturn]] inline void Die(const std::string& what) {
  std::fprintf(stderr, "%s: %s\n", program_invocation_short_name, what.c_str());
  std::exit(1);
}

[[noreturn]] inline void Die(const std::string& what, const Status& st) {
  Die(what + ": " + st.ToString());
}

/// Exits with `what` and the status unless it is OK.
inline void CheckOk(const Status& st, const std::string& what) {
  if (!st.ok()) Die(what, st);
}

}  // namespace reft::bench
