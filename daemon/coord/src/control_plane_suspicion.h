#pragma once
/// \file control_plane_suspicion.h
/// \brief When to blame etcd rather than the nodes (docs/coordination.md "Deaths held while
/// the control plane is suspect").
///
/// The problem: a node's death is its lease lapsing, and a lease lapses when its renewals do
/// not reach etcd in time — because the node died, or because etcd (or the path to it) was too
/// slow. An overloaded etcd, a slow etcd disk or a leader election makes many leases lapse at
/// once, every one of them a live node, and each false death starts a recovery that adds load.
/// Kubernetes damps the same cascade for node leases: when a large share of nodes turns
/// unhealthy at once it stops evicting and blames the control plane.
///
/// This is the rule, kept pure so that a table can test it: the control plane is *suspect*
/// from a signal until one window (the lease TTL) has passed without another. Signals: an etcd
/// answer slower than a fifth of the window (renewals run every third of it: such an answer
/// eats most of the margin), or no answer at all; a change of etcd's raft term (a new
/// leader); and more lease lapses within one window than `mass_expiry_fraction` of the
/// registered nodes — never fewer than two: a lone death is a death, and is declared at once.
/// One per control plane (per reftd); thread-safe.

#include <chrono>
#include <cstdint>
#include <deque>
#include <optional>
#include <string>

#include "reft/mutex.h"

namespace reft::coord {

struct SuspicionOptions {
  /// More lapses than this share of the registered nodes within one window is a mass expiry
  /// (`etcd.mass_expiry_fraction`).
  double mass_expiry_fraction = 0.05;
};

/// \brief Why and since when the control plane is suspect.
struct Suspicion {
  std::chrono::steady_clock::time_point since;  ///< the first signal of this episode
  std::string reason;                            ///< the first signal's, in words
};

class ControlPlaneSuspicion {
 public:
  using Clock = std::chrono::steady_clock;

  explicit ControlPlaneSuspicion(SuspicionOptions options) : options_(options) {}

  /// The window a signal lasts (the lease TTL, which follows the cluster's size).
  void SetWindow(std::chrono::milliseconds window);
  std::chrono::milliseconds window() const;

  /// One etcd call or keep-alive round took `latency`; `answered` false: no member answered.
  void Answer(Clock::time_point now, std::chrono::milliseconds latency, bool answered);
  /// The raft term an etcd answer carried (0: not known). A change after the first is a new
  /// leader.
  void LeaderTerm(Clock::time_point now, uint64_t term);
  /// A registration lapsed while `registered` nodes remain registered. True when its death
  /// must be held for confirmation: the control plane is suspect, this lapse counted.
  bool Lapsed(Clock::time_point now, size_t registered);

  /// The current episode, or nothing when the last signal is more than a window old.
  std::optional<Suspicion> Current(Clock::time_point now) const;

 private:
  void SignalLocked(Clock::time_point now, std::string reason) REFT_REQUIRES(mu_);
  std::optional<Suspicion> CurrentLocked(Clock::time_point now) const REFT_REQUIRES(mu_);

  const SuspicionOptions options_;
  mutable reft::Mutex mu_;
  std::chrono::milliseconds window_ REFT_GUARDED_BY(mu_){5000};
  std::deque<Clock::time_point> lapses_ REFT_GUARDED_BY(mu_);  // within the last window
  std::optional<Suspicion> episode_ REFT_GUARDED_BY(mu_);
  Clock::time_point last_signal_ REFT_GUARDED_BY(mu_){};
  uint64_t term_ REFT_GUARDED_BY(mu_) = 0;
};

}  // namespace reft::coord
