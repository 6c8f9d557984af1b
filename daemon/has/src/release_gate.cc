#include "reft/has/release_gate.h"

#include <algorithm>

namespace reft::has {

namespace {
constexpr double kMinTrust = 0.1;
}  // namespace

void ReleaseGate::EndSnapshot(bool missed) {
  const double t = trust_ < 0 ? options_.safety : trust_;
  trust_ = missed ? std::max(kMinTrust, t * 0.75) : std::min(options_.safety, t + 0.1);
}

void ReleaseGate::Begin(double now, uint64_t total_bytes) {
  (void)total_bytes;
  start_ = now;
}

Layer ReleaseGate::Decide(double now, uint64_t remaining_bytes, uint64_t chunk_bytes,
                          bool in_bubble, bool fence_waiting) const {
  if (remaining_bytes == 0) return Layer::kDeferred;
  if (fence_waiting) return Layer::kCompute;  // the deadline is here: the trainer waits
  const double rel = now - start_;
  if (in_bubble) {
    // Issue a chunk only if the predicted bubble still holds it, so the copy lands inside the
    // bubble rather than spilling into the next compute op. A bubble the profiler did not
    // predict (hint without matching window) is used as it comes.
    const double chunk_time = static_cast<double>(chunk_bytes) / bw_;
    bool predicted = false;
    for (const auto& [s, e] : profiler_.windows()) {
      if (rel >= s && rel < e) {
        predicted = true;
        if (e - rel >= chunk_time) return Layer::kBubble;
      }
    }
    if (!predicted) return Layer::kBubble;
  }
  if (!profiler_.has_prediction()) return Layer::kCompute;  // nothing known: plain async copy
  // The deadline is a prediction from earlier iterations: keep a margin for jitter.
  const double deadline = profiler_.deadline() - options_.deadline_margin_s;
  // Time still needed, with one chunk of margin (a released chunk cannot be interrupted).
  const double need = static_cast<double>(remaining_bytes + chunk_bytes) / bw_;
  const double bubbles = Trust() * profiler_.IdleBetween(rel, deadline);
  // Algorithm 1 split evaluated now: what the bubbles cannot hold goes alongside compute.
  if (need > bubbles || need > deadline - rel) return Layer::kCompute;
  return Layer::kDeferred;
}

ReleaseGate::Release ReleaseGate::DecideBatch(double now, uint64_t remaining_bytes,
                                              uint64_t chunk_bytes, bool in_bubble,
                                              bool fence_waiting) const {
  Release r;
  r.layer = Decide(now, remaining_bytes, chunk_bytes, in_bubble, fence_waiting);
  if (r.layer == Layer::kDeferred || chunk_bytes == 0) return r;
  auto whole = [&](double bytes) {
    const auto chunks = static_cast<uint64_t>(std::max(1.0, bytes / static_cast<double>(chunk_bytes)));
    return std::min(remaining_bytes, chunks * chunk_bytes);
  };
  const double rel = now - start_;
  if (fence_waiting || !profiler_.has_prediction()) {
    r.bytes = remaining_bytes;
  } else if (r.layer == Layer::kBubble) {
    double left = 0;  // rest of the predicted bubble we are in
    for (const auto& [s, e] : profiler_.windows()) {
      if (rel >= s && rel < e) left = e - rel;
    }
    // Small batches inside a bubble: a bubble that ends earlier than predicted then costs
    // at most one small batch outside it.
    r.bytes = std::min(whole(Trust() * left * bw_),
                       std::max<uint64_t>(1, options_.max_bubble_batch_chunks) * chunk_bytes);
    r.bytes = std::min(r.bytes, remaining_bytes);
  } else {
    // W_*: what the remaining predicted bubbles cannot hold before the deadline.
    const double deadline = profiler_.deadline() - options_.deadline_margin_s;
    const double bubble_bytes = Trust() * profiler_.IdleBetween(rel, deadline) * bw_;
    r.bytes = whole(static_cast<double>(remaining_bytes + chunk_bytes) - bubble_bytes);
  }
  return r;
}

void ReleaseGate::ObserveCopy(uint64_t bytes, double seconds) {
  if (seconds <= 0 || bytes == 0) return;
  const double measured = static_cast<double>(bytes) / seconds;
  bw_ += options_.bandwidth_weight * (measured - bw_);
}

}  // namespace reft::has
