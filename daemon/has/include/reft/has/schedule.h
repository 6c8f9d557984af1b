#pragma once
/// \file schedule.h
/// \brief The three-layer HAS plan (docs/has.md): split a stage's snapshot work into chunks
/// and place them on the stage's timeline: (1) device bubbles, (2) alongside compute (capacity
/// scaled by the allowed copy-link share alpha), (3) alongside communication, only when the copy
/// link differs from the training link. Everything must end before the deadline (the next
/// optimizer step needs the buffers); what does not fit is reported as deferred, never placed
/// late. AEC parity work is placed the same way (bubbles first). Pure function: thread-safe.

#include <cstdint>
#include <vector>

#include "reft/result.h"

namespace reft::has {

/// Layers in fill order; kDeferred = does not fit before the deadline.
enum class Layer : int { kDeferred = 0, kBubble = 1, kCompute = 2, kCommunication = 3 };
const char* LayerName(Layer layer);

/// \brief A span of the stage's timeline (seconds from the snapshot's start) and what the
/// device does there. Windows must not overlap: one copy engine serves them all.
struct Window {
  double start = 0;
  double end = 0;
  Layer layer = Layer::kBubble;  ///< kBubble (idle), kCompute or kCommunication
};

enum class WorkKind { kCopy, kParity };

/// \brief A piece of snapshot work: `bytes` processed at `bytes_per_second` (the copy
/// bandwidth B_io for copies, the encode throughput for AEC parity).
struct WorkItem {
  WorkKind kind = WorkKind::kCopy;
  uint64_t bytes = 0;
  double bytes_per_second = 0;
};

struct PlanOptions {
  uint64_t chunk_bytes = 4ull << 20;  ///< copy-chunk size (the split unit)
  double deadline = 0;                ///< seconds from the snapshot start; nothing ends later
  double compute_share = 1.0;         ///< alpha: share of B_io usable alongside compute, (0, 1]
  bool copy_link_differs = false;     ///< layer 3 allowed (e.g. NVLink training, PCIe copies)
};

/// \brief One chunk placed on the timeline.
struct Placement {
  size_t item = 0;      ///< index into the work items
  uint64_t offset = 0;  ///< byte offset inside the item
  uint64_t bytes = 0;
  Layer layer = Layer::kDeferred;
  double start = 0, end = 0;  ///< planned execution span (0, 0 when deferred)
};

struct Plan {
  std::vector<Placement> placements;  ///< every chunk of every item, in item/offset order
  uint64_t bytes_in[4] = {0, 0, 0, 0};  ///< bytes per Layer (index = static_cast<int>(layer))
  uint64_t deferred_bytes() const { return bytes_in[0]; }
  double finish = 0;  ///< end of the last placed chunk
};

/// \brief Plans the chunks of `items` (in order) onto `windows`. Layer by layer: every bubble
/// window in time order is filled before any compute window is used, compute before
/// communication. A chunk is placed whole inside one window (so a chunk "in a bubble" is
/// entirely in it). InvalidArgument for overlapping/inverted windows, a zero chunk size, a
/// non-positive throughput or an alpha outside (0, 1].
Result<Plan> PlanSnapshot(const std::vector<WorkItem>& items, const std::vector<Window>& windows,
                          const PlanOptions& options);

/// \brief The complement of `bubbles` inside [0, deadline] as kCompute windows, plus the
/// bubbles themselves: a stage timeline for PlanSnapshot.
std::vector<Window> TimelineFromBubbles(const std::vector<std::pair<double, double>>& bubbles,
                                        double deadline);

}  // namespace reft::has
