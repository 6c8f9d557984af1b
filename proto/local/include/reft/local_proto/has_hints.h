#pragma once
/// \file has_hints.h
/// \brief The HAS hint page (docs/has.md): one page of shared memory
/// (a sealed memfd the client sends once with `has_attach`) through which a trainer tells its
/// reftd, without a system call, when its device is idle (bubble_begin / bubble_end), when it
/// took a snapshot and when it waits in fence() (the optimizer-step deadline). The daemon
/// writes back what its release gate did. Every field is a lock-free atomic: the page is
/// shared between two processes and either may die at any time; a torn read only costs one
/// scheduling decision.

#include <atomic>
#include <cstdint>

namespace reft::local_proto {

struct HasHintPage {
  static constexpr uint32_t kMagic = 0x31534148;  // "HAS1"
  static constexpr uint32_t kRing = 128;

  std::atomic<uint32_t> magic;
  std::atomic<uint32_t> in_bubble;      ///< client: 1 between bubble_begin and bubble_end
  std::atomic<uint32_t> fence_waiting;  ///< client: 1 while fence() waits for the copy
  std::atomic<uint32_t> reserved;
  std::atomic<uint64_t> bubble_seq;     ///< client: bubbles begun so far
  std::atomic<int64_t> bubble_begin_ns; ///< client: CLOCK_MONOTONIC start of the current bubble
  std::atomic<int64_t> snapshot_ns;     ///< client: time of the last snapshot() call
  std::atomic<int64_t> fence_ns;        ///< client: time of the last fence() call (the deadline)
  std::atomic<uint64_t> ring_head;      ///< client: bubbles ended so far (ring index = head % kRing)
  struct Interval {
    std::atomic<int64_t> begin_ns;
    std::atomic<int64_t> end_ns;
  } ring[kRing];                        ///< client: the last kRing finished bubbles
  /// daemon: cumulative device-copy bytes released per layer (index = has::Layer: 1 bubble,
  /// 2 compute, 3 communication) and the bubble bytes whose copy also *ended* in that bubble.
  std::atomic<uint64_t> released_bytes[4];
  std::atomic<uint64_t> landed_in_bubble_bytes;
  std::atomic<uint64_t> gated_snapshots;  ///< daemon: snapshots pulled through the gate
  std::atomic<uint32_t> copying;          ///< daemon: 1 while a device-copy chunk is in flight
};

static_assert(std::atomic<int64_t>::is_always_lock_free && std::atomic<uint32_t>::is_always_lock_free,
              "the HAS hint page needs lock-free atomics in shared memory");
constexpr uint64_t kHasHintPageBytes = 4096;
static_assert(sizeof(HasHintPage) <= kHasHintPageBytes, "HAS hint page exceeds one page");

/// \brief CLOCK_MONOTONIC in nanoseconds (the page's clock; same on both sides of one node).
int64_t MonotonicNs();

}  // namespace reft::local_proto
