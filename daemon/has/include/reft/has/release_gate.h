#pragma once
/// \file release_gate.h
/// \brief The runtime half of HAS: decides, chunk by chunk, when the daemon may issue the next
/// device->host copy of a snapshot. Algorithm 1 online: the part of the remaining bytes that
/// the predicted bubbles before the deadline cannot hold (W_*) is released at once, alongside
/// compute; the rest waits for the trainer's bubble hints (W_bubble). A waiting fence (the
/// trainer reached its optimizer step) releases everything. Pure logic with caller-supplied
/// times (seconds): unit-testable with a fake clock. Not thread-safe (one session strand).

#include <cstdint>

#include "reft/has/idle_profiler.h"
#include "reft/has/schedule.h"

namespace reft::has {

struct GateOptions {
  double safety = 0.8;              ///< share of predicted bubble time that is trusted
  double bytes_per_second = 1e9;    ///< initial copy bandwidth estimate (B_io)
  double bandwidth_weight = 0.3;    ///< EWMA weight of measured chunk bandwidth
  double deadline_margin_s = 0.002; ///< seconds before the predicted deadline kept free (jitter)
  uint32_t max_bubble_batch_chunks = 2;  ///< chunks issued at once inside a bubble
};

class ReleaseGate {
 public:
  explicit ReleaseGate(GateOptions options) : options_(options), bw_(options.bytes_per_second) {}

  /// \brief A snapshot of `total_bytes` starts at absolute time `now`.
  void Begin(double now, uint64_t total_bytes);
  /// \brief Whether to issue the next chunk now and in which layer; kDeferred = wait and ask
  /// again (the caller polls the hint page). `chunk_bytes` is the next chunk's size.
  Layer Decide(double now, uint64_t remaining_bytes, uint64_t chunk_bytes, bool in_bubble,
               bool fence_waiting) const;
  /// \brief Decide() plus how many bytes to issue as one batch before synchronising (a whole
  /// number of chunks, at least one, at most `remaining_bytes`): the rest of the predicted
  /// bubble in layer 1, the W_* excess in layer 2, everything when the fence waits. Batching
  /// keeps the per-chunk synchronisation cost off the copy link.
  struct Release {
    Layer layer = Layer::kDeferred;
    uint64_t bytes = 0;
  };
  Release DecideBatch(double now, uint64_t remaining_bytes, uint64_t chunk_bytes, bool in_bubble,
                      bool fence_waiting) const;
  /// \brief The snapshot ended; `missed` = the fence had to wait for it (deadline missed). A
  /// miss lowers the trust in predicted bubbles (more W_* alongside compute next time); clean
  /// snapshots restore it step by step up to GateOptions::safety.
  void EndSnapshot(bool missed);
  double trust() const { return Trust(); }
  /// \brief A chunk of `bytes` took `seconds`: refines B_io.
  void ObserveCopy(uint64_t bytes, double seconds);

  IdleProfiler& profiler() { return profiler_; }
  double bytes_per_second() const { return bw_; }
  double start() const { return start_; }

 private:
  GateOptions options_;
  IdleProfiler profiler_;
  double bw_;
  double start_ = 0;
  double trust_ = -1;  // current bubble trust; < 0 = options_.safety
  double Trust() const { return trust_ < 0 ? options_.safety : trust_; }
};

}  // namespace reft::has
