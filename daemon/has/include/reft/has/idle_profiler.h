#pragma once
/// \file idle_profiler.h
/// \brief Online profiler of one stage's idle time (docs/has.md):
/// learns, per iteration, the idle windows (from bubble_begin/bubble_end hints) and the time from
/// the snapshot's start to the deadline (the fence before the optimizer step). Starts from the
/// simulator's estimate (Seed) and moves to measured values with an exponential average.
/// Not thread-safe: owned by one session strand.

#include <utility>
#include <vector>

namespace reft::has {

class IdleProfiler {
 public:
  /// \param weight  weight of a new observation in the average, (0, 1]
  explicit IdleProfiler(double weight = 0.5) : weight_(weight) {}

  /// \brief Starting point: windows relative to the snapshot start, and the deadline.
  void Seed(std::vector<std::pair<double, double>> windows, double deadline);

  /// \brief One finished iteration: its measured idle windows (relative to the snapshot start,
  /// clipped by the caller to [0, deadline]) and its measured deadline. When the window count
  /// matches the current prediction they are averaged pairwise, otherwise replaced.
  void Observe(const std::vector<std::pair<double, double>>& windows, double deadline);

  bool has_prediction() const { return deadline_ > 0; }
  const std::vector<std::pair<double, double>>& windows() const { return windows_; }
  double deadline() const { return deadline_; }
  /// \brief Sum of predicted idle time inside [from, to] (relative times).
  double IdleBetween(double from, double to) const;
  int observations() const { return observations_; }

 private:
  double weight_;
  std::vector<std::pair<double, double>> windows_;
  double deadline_ = 0;
  int observations_ = 0;
};

}  // namespace reft::has
