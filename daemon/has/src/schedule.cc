#include "reft/has/schedule.h"

#include <algorithm>
#include <string>

namespace reft::has {

const char* LayerName(Layer layer) {
  switch (layer) {
    case Layer::kBubble: return "bubble";
    case Layer::kCompute: return "compute";
    case Layer::kCommunication: return "communication";
    case Layer::kDeferred: return "deferred";
  }
  return "unknown";
}

namespace {

struct Cursor {
  Window w;
  double at;  // next free time inside w
};

}  // namespace

Result<Plan> PlanSnapshot(const std::vector<WorkItem>& items, const std::vector<Window>& windows,
                          const PlanOptions& options) {
  if (options.chunk_bytes == 0) return Status::InvalidArgument("chunk_bytes must be > 0");
  if (!(options.compute_share > 0 && options.compute_share <= 1)) {
    return Status::InvalidArgument("compute_share " + std::to_string(options.compute_share) +
                                   " must be in (0, 1]");
  }
  for (size_t i = 0; i < items.size(); ++i) {
    if (items[i].bytes > 0 && !(items[i].bytes_per_second > 0)) {
      return Status::InvalidArgument("work item " + std::to_string(i) +
                                     ": bytes_per_second must be > 0");
    }
  }
  std::vector<Window> sorted = windows;
  std::sort(sorted.begin(), sorted.end(),
            [](const Window& a, const Window& b) { return a.start < b.start; });
  for (size_t i = 0; i < sorted.size(); ++i) {
    if (sorted[i].end < sorted[i].start) {
      return Status::InvalidArgument("window " + std::to_string(i) + " ends before it starts");
    }
    if (sorted[i].layer == Layer::kDeferred) {
      return Status::InvalidArgument("window " + std::to_string(i) + " has layer 'deferred'");
    }
    if (i > 0 && sorted[i].start < sorted[i - 1].end - 1e-12) {
      return Status::InvalidArgument("windows overlap at t=" + std::to_string(sorted[i].start));
    }
  }
  // Per layer, the windows in time order, clipped to the deadline.
  std::vector<Cursor> by_layer[4];
  for (const auto& w : sorted) {
    if (w.layer == Layer::kCommunication && !options.copy_link_differs) continue;
    Window c = w;
    c.end = std::min(c.end, options.deadline);
    if (c.end <= c.start) continue;
    by_layer[static_cast<int>(w.layer)].push_back({c, c.start});
  }
  Plan plan;
  for (size_t i = 0; i < items.size(); ++i) {
    for (uint64_t off = 0; off < items[i].bytes; off += options.chunk_bytes) {
      Placement p;
      p.item = i;
      p.offset = off;
      p.bytes = std::min(options.chunk_bytes, items[i].bytes - off);
      for (Layer layer : {Layer::kBubble, Layer::kCompute, Layer::kCommunication}) {
        if (p.layer != Layer::kDeferred) break;
        // Alongside compute the copy gets only alpha of the link (interference budget).
        const double rate = items[i].bytes_per_second *
                            (layer == Layer::kCompute ? options.compute_share : 1.0);
        const double need = static_cast<double>(p.bytes) / rate;
        for (auto& c : by_layer[static_cast<int>(layer)]) {
          if (c.w.end - c.at + 1e-12 >= need) {
            p.layer = layer;
            p.start = c.at;
            p.end = c.at + need;
            c.at = p.end;
            break;
          }
        }
      }
      plan.bytes_in[static_cast<int>(p.layer)] += p.bytes;
      if (p.layer != Layer::kDeferred) plan.finish = std::max(plan.finish, p.end);
      plan.placements.push_back(p);
    }
  }
  return plan;
}

std::vector<Window> TimelineFromBubbles(const std::vector<std::pair<double, double>>& bubbles,
                                        double deadline) {
  std::vector<std::pair<double, double>> b = bubbles;
  std::sort(b.begin(), b.end());
  std::vector<Window> out;
  double cursor = 0;
  for (auto [s, e] : b) {
    s = std::max(s, cursor);
    e = std::min(e, deadline);
    if (e <= s) continue;
    if (s > cursor) out.push_back({cursor, s, Layer::kCompute});
    out.push_back({s, e, Layer::kBubble});
    cursor = e;
  }
  if (deadline > cursor) out.push_back({cursor, deadline, Layer::kCompute});
  return out;
}

}  // namespace reft::has
