#pragma once
/// \file replica.h
/// \brief AorReplica: the host replica of a ring neighbour's optimizer shard under ZeRO-1,
/// advanced every iteration by replaying the owner's AdamW update (docs/protection.md
/// "AOR").

#include <cstddef>
#include <cstdint>
#include <string>

#include "reft/aor/adamw.h"
#include "reft/aor/step_hyper.h"
#include "reft/status.h"

namespace reft::aor {

/// \brief Replays one owner's optimizer updates onto a replica of its fp32 state.
///
/// Owns nothing but two counters and a staleness flag: the three arrays are views (typically
/// the `aor/<name>` region of a store slot, seeded from the owner's snapshot). Messages must
/// arrive in iteration order, one per training iteration, skipped ones included. A gap
/// (iteration s+2 after s) means an update was lost — e.g. the daemon's bounded queue dropped
/// it because the host fell behind (docs/protection.md "AOR": staleness) — and the replica can
/// no longer equal the owner: it becomes *stale*, every Apply fails with kLost ("resynchronise
/// from the owner") until the caller has copied the owner's state into the arrays and called
/// Resynchronized(). status.h has no FailedPrecondition; kLost is the closest code ("this
/// redundancy is gone"), and it is distinct from the kInvalidArgument of a bad message.
///
/// Not thread-safe: one caller at a time (the daemon's AOR worker). Apply itself may use
/// `threads` workers internally.
class AorReplica {
 public:
  /// \param state      views of the replica arrays, equal to the owner's state after training
  ///                   iteration `iteration`, at optimizer step count `step`
  /// \param threads    workers for each Apply (>= 1)
  AorReplica(AdamWState state, uint64_t iteration, uint64_t step, int threads = 1);

  /// \brief Applies the update of training iteration `hyper.iteration` with `n` gradients.
  /// \return OK (state advanced, or only the counters for a skipped iteration);
  ///         kInvalidArgument, nothing changed: invalid hyper, n != size, a null gradient, an
  ///         iteration already applied (duplicate);
  ///         kLost, replica now stale: an iteration was missed, the step count disagrees with
  ///         the owner's, or it was already stale.
  Status Apply(const StepHyper& hyper, const void* grad, GradDtype dtype, size_t n);

  /// \brief Apply, but out of place: the current views are only read, the updated state is
  /// written into `next` (AdamWUpdateInto) and the replica's views become `next`. For a
  /// replica kept in snapshot slots: the previous step's slot stays intact (it may be the
  /// committed snapshot) while the new one is written. Same checks and results as Apply; on
  /// any error nothing is written into `next` and the views stay as they were.
  Status ApplyInto(const AdamWState& next, const StepHyper& hyper, const void* grad,
                   GradDtype dtype, size_t n);

  /// \brief DecodeStepHyper (hyper_codec.h) then Apply.
  Status ApplyEncoded(const uint8_t* hyper, size_t hyper_size, const void* grad, GradDtype dtype,
                      size_t n);

  /// \brief Marks the replica stale, e.g. when the caller dropped an update under
  /// back-pressure before it reached Apply. Idempotent; keeps the first reason.
  void MarkStale(std::string reason);

  /// \brief The caller has copied the owner's state at (`iteration`, `step`) into the arrays;
  /// clears staleness.
  void Resynchronized(uint64_t iteration, uint64_t step);

  bool stale() const { return stale_; }
  /// \brief Why it is stale ("" when not).
  const std::string& stale_reason() const { return stale_reason_; }
  /// \brief Last training iteration included in the state.
  uint64_t iteration() const { return iteration_; }
  /// \brief Optimizer step count of the state (number of applied, non-skipped updates).
  uint64_t step() const { return step_; }
  const AdamWState& state() const { return state_; }
  int threads() const { return threads_; }
  void set_threads(int threads) { threads_ = threads < 1 ? 1 : threads; }

 private:
  Status Stale() const;
  /// The checks shared by Apply and ApplyInto (may mark the replica stale).
  Status Check(const StepHyper& hyper, const void* grad, size_t n);

  AdamWState state_;
  uint64_t iteration_;
  uint64_t step_;
  int threads_;
  bool stale_ = false;
  std::string stale_reason_;
};

}  // namespace reft::aor
