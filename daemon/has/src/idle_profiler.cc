#include "reft/has/idle_profiler.h"

#include <algorithm>

namespace reft::has {

void IdleProfiler::Seed(std::vector<std::pair<double, double>> windows, double deadline) {
  windows_ = std::move(windows);
  deadline_ = deadline;
}

void IdleProfiler::Observe(const std::vector<std::pair<double, double>>& windows, double deadline) {
  observations_++;
  if (deadline_ <= 0 || observations_ == 1) {  // first measurement beats the simulator
    deadline_ = deadline;
  } else {
    deadline_ += weight_ * (deadline - deadline_);
  }
  if (windows.size() != windows_.size() || observations_ == 1) {
    windows_ = windows;  // structure changed (or first measurement beats the simulator)
    return;
  }
  for (size_t i = 0; i < windows.size(); ++i) {
    windows_[i].first += weight_ * (windows[i].first - windows_[i].first);
    windows_[i].second += weight_ * (windows[i].second - windows_[i].second);
  }
}

double IdleProfiler::IdleBetween(double from, double to) const {
  double sum = 0;
  for (const auto& [s, e] : windows_) {
    const double a = std::max(s, from), b = std::min(e, to);
    if (b > a) sum += b - a;
  }
  return sum;
}

}  // namespace reft::has
