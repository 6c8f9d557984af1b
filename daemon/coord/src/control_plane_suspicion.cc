#include "control_plane_suspicion.h"

#include <algorithm>
#include <cmath>

namespace reft::coord {

namespace {
std::string Ms(std::chrono::milliseconds d) { return std::to_string(d.count()) + " ms"; }
}  // namespace

void ControlPlaneSuspicion::SetWindow(std::chrono::milliseconds window) {
  reft::MutexLock lock(mu_);
  window_ = window;
}

std::chrono::milliseconds ControlPlaneSuspicion::window() const {
  reft::MutexLock lock(mu_);
  return window_;
}

void ControlPlaneSuspicion::SignalLocked(Clock::time_point now, std::string reason) {
  if (!CurrentLocked(now)) episode_ = Suspicion{now, std::move(reason)};
  last_signal_ = now;
}

void ControlPlaneSuspicion::Answer(Clock::time_point now, std::chrono::milliseconds latency,
                                   bool answered) {
  reft::MutexLock lock(mu_);
  const auto slow = window_ / 5;
  if (!answered) {
    SignalLocked(now, "etcd did not answer (" + Ms(latency) + ")");
  } else if (latency > slow) {
    SignalLocked(now, "etcd answered in " + Ms(latency) + " (slow: over " + Ms(slow) + ")");
  }
}

void ControlPlaneSuspicion::LeaderTerm(Clock::time_point now, uint64_t term) {
  if (term == 0) return;
  reft::MutexLock lock(mu_);
  if (term_ != 0 && term != term_) {
    SignalLocked(now, "etcd changed leader (raft term " + std::to_string(term_) + " -> " +
                          std::to_string(term) + ")");
  }
  term_ = std::max(term_, term);
}

bool ControlPlaneSuspicion::Lapsed(Clock::time_point now, size_t registered) {
  reft::MutexLock lock(mu_);
  while (!lapses_.empty() && now - lapses_.front() > window_) lapses_.pop_front();
  lapses_.push_back(now);
  // The lapsed nodes no longer count as registered: the share is of the nodes there were.
  const size_t before = registered + lapses_.size();
  const double allowed =
      std::max(1.0, std::floor(options_.mass_expiry_fraction * static_cast<double>(before)));
  if (static_cast<double>(lapses_.size()) > allowed) {
    SignalLocked(now, std::to_string(lapses_.size()) + " of " + std::to_string(before) +
                          " node leases lapsed within " + Ms(window_) + " (mass expiry: over " +
                          std::to_string(static_cast<size_t>(allowed)) + ")");
  }
  return CurrentLocked(now).has_value();
}

std::optional<Suspicion> ControlPlaneSuspicion::Current(Clock::time_point now) const {
  reft::MutexLock lock(mu_);
  return CurrentLocked(now);
}

std::optional<Suspicion> ControlPlaneSuspicion::CurrentLocked(Clock::time_point now) const {
  if (!episode_ || now - last_signal_ > window_) return std::nullopt;
  return episode_;
}

}  // namespace reft::coord
