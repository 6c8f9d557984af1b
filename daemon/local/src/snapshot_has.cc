/// \file snapshot_has.cc
/// \brief HAS in the snapshot writer (docs/has.md): the trainer's hint page, the
/// online bubble profiler and the release gate that schedules the device work of a snapshot
/// into bubbles first, alongside compute when they cannot hold it before the deadline.

#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "reft/has/bubble_estimate.h"
#include "reft/kernels/emulated.h"
#include "reft/local_proto/has_hints.h"
#include "reft/units.h"
#include "snapshot_has_state.h"
#include "snapshot_writer.h"

namespace reft::local {

Status SnapshotWriter::AttachHas(const local_proto::Frame& f) {
  if (f.fds.size() != 1) return Status::Protocol("has_attach must carry exactly one fd");
  // Optional payload: the pipeline as five little-endian int64 (stages, this stage,
  // micro-batches, forward ns, backward ns) -> the simulator's bubble estimate seeds the gate.
  if (!f.payload.empty() && f.payload.size() != 5 * sizeof(int64_t)) {
    return Status::Protocol("has_attach payload must be empty or 40 bytes");
  }
  struct stat st {};
  if (::fstat(f.fds[0].get(), &st) != 0 ||
      static_cast<uint64_t>(st.st_size) < local_proto::kHasHintPageBytes) {
    return Status::InvalidArgument("has_attach: the hint page fd is smaller than one page");
  }
  void* map = ::mmap(nullptr, local_proto::kHasHintPageBytes, PROT_READ | PROT_WRITE, MAP_SHARED,
                     f.fds[0].get(), 0);
  if (map == MAP_FAILED) return Status::IoError(std::string("has_attach: mmap: ") + std::strerror(errno));
  has::GateOptions options;
  const uint64_t emulated = kernels::EmulatedCopyBandwidth();
  if (emulated > 0) options.bytes_per_second = static_cast<double>(emulated);
  auto state = std::make_unique<HasState>(options);
  state->page = static_cast<local_proto::HasHintPage*>(map);
  if (state->page->magic.load() != local_proto::HasHintPage::kMagic) {
    return Status::InvalidArgument("has_attach: the hint page has a bad magic number");
  }
  if (const char* env = std::getenv("REFT_HAS_CHUNK"); env != nullptr && *env != '\0') {
    REFT_ASSIGN_OR_RETURN(uint64_t c, ParseByteSize(env));
    if (c == 0) return Status::InvalidArgument("REFT_HAS_CHUNK must be > 0");
    state->chunk_bytes = c;
  }
  if (!f.payload.empty()) {
    int64_t v[5];
    std::memcpy(v, f.payload.data(), sizeof(v));
    if (v[0] < 1 || v[0] > 1024 || v[1] < 0 || v[1] >= v[0] || v[2] < 1 || v[2] > 1 << 20 ||
        v[3] < 0 || v[4] < 0) {
      return Status::InvalidArgument("has_attach: bad pipeline hint (stages " +
                                     std::to_string(v[0]) + ", stage " + std::to_string(v[1]) +
                                     ", micro-batches " + std::to_string(v[2]) + ")");
    }
    planner::PipelineSpec spec;
    spec.forward.assign(static_cast<size_t>(v[0]), static_cast<double>(v[3]) * 1e-9);
    spec.backward.assign(static_cast<size_t>(v[0]), static_cast<double>(v[4]) * 1e-9);
    spec.micro_batches = static_cast<int>(v[2]);
    REFT_ASSIGN_OR_RETURN(auto est, has::EstimateBubbles(spec));
    const auto& stage = est[static_cast<size_t>(v[1])];
    state->gate.profiler().Seed(stage.windows, stage.makespan);
  }
  has_ = std::move(state);
  return Status::OK();
}

Status SnapshotWriter::PullDeviceGated(const store::SlotRef& slot,
                                       const std::vector<kernels::EventExport>& ready,
                                       const std::vector<std::pair<int, int>>& ready_keys) {
  HasState& h = *has_;
  local_proto::HasHintPage* pg = h.page;
  constexpr double kNs = 1e-9;
  // Online profiler: the previous iteration's bubbles, relative to its snapshot() call, and
  // its deadline (its fence() call, just before the optimizer step).
  const int64_t snap_ns = pg->snapshot_ns.load(std::memory_order_acquire);
  const int64_t fence_ns = pg->fence_ns.load(std::memory_order_acquire);
  const uint64_t head = pg->ring_head.load(std::memory_order_acquire);
  if (h.prev_snapshot_ns > 0 && fence_ns > h.prev_snapshot_ns && fence_ns <= snap_ns) {
    std::vector<std::pair<double, double>> windows;
    const uint64_t kRing = local_proto::HasHintPage::kRing;
    // Every remembered bubble, clipped to the previous iteration: a bubble may have ended
    // before that iteration's pull started, so "seen" entries are not skipped.
    for (uint64_t i = head > kRing ? head - kRing : 0; i < head; ++i) {
      const auto& r = pg->ring[i % kRing];
      const int64_t b = std::max(r.begin_ns.load(), h.prev_snapshot_ns);
      const int64_t e = std::min(r.end_ns.load(), fence_ns);
      if (e > b) windows.emplace_back((b - h.prev_snapshot_ns) * kNs, (e - h.prev_snapshot_ns) * kNs);
    }
    h.gate.profiler().Observe(windows, (fence_ns - h.prev_snapshot_ns) * kNs);
  }
  h.prev_snapshot_ns = snap_ns;

  // The snapshot's device work in pieces of at most chunk_bytes: the unit the gate releases.
  REFT_ASSIGN_OR_RETURN(std::vector<DeviceOp> ops, DeviceOps(slot));
  REFT_RETURN_NOT_OK(WaitReadyEvents(ops, ready, ready_keys));
  std::vector<DeviceOp> chunks;
  std::vector<kernels::CopyStream*> used;
  uint64_t total = 0;
  for (const auto& op : ops) {
    for (uint64_t off = 0; off < op.size; off += h.chunk_bytes) {
      DeviceOp piece = op;
      piece.dst += off;
      piece.size = std::min(h.chunk_bytes, op.size - off);
      for (auto& src : piece.sources) src.second += off;
      chunks.push_back(std::move(piece));
    }
    if (std::find(used.begin(), used.end(), op.stream) == used.end()) used.push_back(op.stream);
    total += op.size;
  }
  h.gate.Begin(snap_ns * kNs, total);
  uint64_t remaining = total;
  size_t next = 0;
  bool missed = false;  // the fence arrived before the last byte: feedback for the gate
  while (next < chunks.size()) {
    has::ReleaseGate::Release rel;
    for (;;) {
      rel = h.gate.DecideBatch(local_proto::MonotonicNs() * kNs, remaining, chunks[next].size,
                               pg->in_bubble.load(std::memory_order_acquire) != 0,
                               pg->fence_waiting.load(std::memory_order_acquire) != 0);
      if (rel.layer != has::Layer::kDeferred) break;
      const timespec pause{0, 200 * 1000};  // poll the hint page every 0.2 ms
      ::nanosleep(&pause, nullptr);
    }
    if (pg->fence_waiting.load(std::memory_order_acquire) != 0) missed = true;
    // Issue the batch, then synchronise once (one wake-up per batch, not per chunk).
    const uint64_t seq = pg->bubble_seq.load(std::memory_order_acquire);
    const int64_t t0 = local_proto::MonotonicNs();
    pg->copying.store(1, std::memory_order_release);
    uint64_t batch = 0;
    Status copied;
    std::vector<kernels::CopyStream*> touched;
    while (next < chunks.size() && (batch == 0 || batch + chunks[next].size <= rel.bytes)) {
      const DeviceOp& c = chunks[next++];
      copied = IssueOp(c);
      if (!copied.ok()) break;
      if (std::find(touched.begin(), touched.end(), c.stream) == touched.end()) touched.push_back(c.stream);
      batch += c.size;
    }
    for (auto* s : touched) {
      Status st = s->Synchronize();
      if (copied.ok()) copied = st;
    }
    pg->copying.store(0, std::memory_order_release);
    REFT_RETURN_NOT_OK(copied);
    h.gate.ObserveCopy(batch, (local_proto::MonotonicNs() - t0) * kNs);
    pg->released_bytes[static_cast<int>(rel.layer)].fetch_add(batch);
    if (rel.layer == has::Layer::kBubble) {
      const int64_t t1 = local_proto::MonotonicNs();
      if (pg->in_bubble.load() != 0 && pg->bubble_seq.load() == seq) {
        pg->landed_in_bubble_bytes.fetch_add(batch);
      } else if (pg->bubble_seq.load() == seq && t1 > t0) {
        // The bubble ended during the batch: the bytes copied before its end (at the batch's
        // measured rate) landed inside it.
        const uint64_t h2 = pg->ring_head.load(std::memory_order_acquire);
        const int64_t end = h2 > 0 ? pg->ring[(h2 - 1) % local_proto::HasHintPage::kRing].end_ns.load() : t0;
        if (end > t0) {
          const double share = std::min(1.0, static_cast<double>(end - t0) / static_cast<double>(t1 - t0));
          pg->landed_in_bubble_bytes.fetch_add(static_cast<uint64_t>(share * static_cast<double>(batch)));
        }
      }
    }
    remaining -= batch;
  }
  h.gate.EndSnapshot(missed);
  for (auto* s : used) REFT_RETURN_NOT_OK(s->Synchronize());  // streams with no chunk (ready waits)
  pg->gated_snapshots.fetch_add(1);
  return Status::OK();
}

}  // namespace reft::local

