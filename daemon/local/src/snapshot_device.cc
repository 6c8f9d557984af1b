/// \file snapshot_device.cc
/// \brief The device side of a snapshot: which bytes of device memory land where in the slot
/// (the rank plan's segments whose source buffers are device memory), and their execution on
/// the daemon's copy streams (docs/data-paths.md "Save"; AEC parity on the device before the
/// D2H copy, "in bubbles" under HAS).

#include <algorithm>
#include <cstring>

#include "reft/log.h"
#include "reft/protect/segments.h"
#include "snapshot_writer.h"

namespace reft::local {

void SnapshotWriter::PinRegion(const store::SlotRef& slot, kernels::DeviceBackend* backend,
                               uint8_t* base, uint64_t size) {
  auto unpin = [backend, base] {
    Status st = backend->UnpinHost(base);
    if (!st.ok()) LogWarning("unpinning a slot region: " + st.ToString());
  };
  Status st = slot.PinOnce(backend, base, [&] { return backend->PinHost(base, size); }, unpin);
  // Pinning is for speed only: a device copy into pageable memory is correct, staged by the
  // driver at a fraction of the bandwidth. Linux refuses long-term pins of shared file mappings
  // outside tmpfs/hugetlbfs (an --shm-dir on a disk file system); say so once per session.
  if (!st.ok() && !unpinned_warned_) {
    unpinned_warned_ = true;
    LogWarning("slot memory of " + slot.info().path + " cannot be page-locked (" + st.ToString() +
               "): device copies run unpinned and slower; put --shm-dir on tmpfs");
  }
}

Result<std::vector<SnapshotWriter::DeviceOp>> SnapshotWriter::DeviceOps(const store::SlotRef& slot) {
  const Plan& p = *plan_;
  const protect::SgGeometry& g = p.slot.geometry;
  const int dp = rank_.dp;
  std::vector<DeviceOp> ops;
  auto region = [&](const std::string& name) -> Result<uint8_t*> {
    REFT_ASSIGN_OR_RETURN(size_t i, slot.FindRegion(name));
    return slot.region_data(i);
  };
  auto source = [&](const protect::SegmentSource& s) -> std::pair<const Buffer*, uint64_t> {
    return {s.buffer < 0 ? nullptr : p.replicated[static_cast<size_t>(s.buffer)], s.offset};
  };
  auto add = [&](DeviceOp op, uint8_t* region_base, uint64_t region_size) -> Status {
    const Buffer* b = nullptr;
    for (const auto& [buf, off] : op.sources) b = b != nullptr ? b : buf;
    REFT_ASSIGN_OR_RETURN(op.stream, buffers_->StreamFor(b->backend, b->reg.memory.device));
    PinRegion(slot, b->backend, region_base, region_size);
    ops.push_back(std::move(op));
    return Status::OK();
  };
  // Own shard and ARC copies: plain copies of the segments whose buffer is device memory
  // (host segments are the client's).
  auto copies = [&](const std::string& name, int shard) -> Status {
    REFT_ASSIGN_OR_RETURN(uint8_t * base, region(name));
    for (const auto& seg : protect::ShardSegments(g, shard)) {
      auto src = source(seg.sources[0]);
      if (src.first == nullptr || src.first->backend == nullptr) continue;
      REFT_RETURN_NOT_OK(add({DeviceOp::Kind::kCopy, base + seg.out_offset, seg.size, {src}, 0,
                              nullptr},
                             base, g.ShardSize(shard)));
    }
    return Status::OK();
  };
  REFT_RETURN_NOT_OK(copies(protect::kRegionShard, dp));
  for (int o = 1; o <= scheme_.arc; ++o) {
    REFT_RETURN_NOT_OK(copies(protect::ArcRegionName(o), (dp + o) % g.m));
  }
  for (const auto& b : buffers_->all()) {
    if (b.backend == nullptr || b.reg.kind != local_proto::BufferKind::kUnique) continue;
    REFT_ASSIGN_OR_RETURN(uint8_t * base, region(protect::UniqueRegionName(b.reg.name)));
    REFT_RETURN_NOT_OK(
        add({DeviceOp::Kind::kCopy, base, b.reg.size, {{&b, 0}}, 0, nullptr}, base, b.reg.size));
  }
  // AOR: the neighbour's slice of each device gradient, D2H into the staging the replay reads
  // after the fence (the trainer may overwrite the gradient as soon as fence() returns).
  for (size_t i = 0; i < p.slot.aor.bindings.size(); ++i) {
    const Buffer* g = p.aor_gradient[i];
    if (g->backend == nullptr) continue;  // host memory: the client copied it
    const auto& b = p.slot.aor.bindings[i];
    DeviceOp op{DeviceOp::Kind::kCopy, p.staging->mem.data() + b.staging_offset, b.grad_bytes,
                {{g, b.grad_offset}}, 0, nullptr};
    REFT_ASSIGN_OR_RETURN(op.stream, buffers_->StreamFor(g->backend, g->reg.memory.device));
    ops.push_back(std::move(op));  // staging was page-locked once, by MakePlan
  }
  if (!p.slot.parity_on_device()) return ops;
  // Parity last: copies of the own data come first under HAS's deadline as well.
  auto parity = [&](DeviceOp::Kind kind, const std::vector<protect::CodingSegment>& segs,
                    uint8_t* out, uint8_t* base, uint64_t region_size, int row) -> Status {
    for (const auto& seg : segs) {
      DeviceOp op{kind, out + seg.out_offset, seg.size, {}, row, nullptr};
      bool any = false;
      for (const auto& s : seg.sources) {
        auto src = source(s);
        if (kind == DeviceOp::Kind::kXor && src.first == nullptr) continue;  // XOR with 0
        any |= src.first != nullptr;
        op.sources.push_back(src);
      }
      if (!any) {  // all padding: the parity of zeros is zero
        std::memset(op.dst, 0, op.size);
        continue;
      }
      REFT_RETURN_NOT_OK(add(std::move(op), base, region_size));
    }
    return Status::OK();
  };
  if (scheme_.aec) {
    REFT_ASSIGN_OR_RETURN(uint8_t * base, region(protect::kRegionAec));
    REFT_RETURN_NOT_OK(
        parity(DeviceOp::Kind::kXor, protect::AecSegments(g, dp), base, base, g.aec_sub, 0));
  }
  if (scheme_.rs > 0) {
    REFT_ASSIGN_OR_RETURN(uint8_t * base, region(protect::kRegionRs));
    for (int q = 0; q < scheme_.rs; ++q) {
      REFT_RETURN_NOT_OK(parity(DeviceOp::Kind::kRs, protect::RsSegments(g, dp, q),
                                base + static_cast<uint64_t>(q) * g.rs_sub, base,
                                g.rs_sub * static_cast<uint64_t>(scheme_.rs), q));
    }
  }
  return ops;
}

Status SnapshotWriter::WaitReadyEvents(const std::vector<DeviceOp>& ops,
                                const std::vector<kernels::EventExport>& ready,
                                const std::vector<std::pair<int, int>>& ready_keys) {
  std::vector<kernels::CopyStream*> done;
  for (const auto& op : ops) {
    if (std::find(done.begin(), done.end(), op.stream) != done.end()) continue;
    done.push_back(op.stream);
    const Buffer* b = nullptr;
    for (const auto& [buf, off] : op.sources) b = b != nullptr ? b : buf;
    const auto key = std::make_pair(static_cast<int>(b->backend->kind()), b->reg.memory.device);
    for (size_t e = 0; e < ready_keys.size(); ++e) {
      if (ready_keys[e] == key) REFT_RETURN_NOT_OK(op.stream->WaitEvent(ready[e]));
    }
  }
  return Status::OK();
}

Status SnapshotWriter::IssueOp(const DeviceOp& op) {
  const Buffer* first = nullptr;
  for (const auto& [buf, off] : op.sources) first = first != nullptr ? first : buf;
  kernels::DeviceBackend* backend = first->backend;
  const std::string what = "pulling '" + first->reg.name + "'";
  switch (op.kind) {
    case DeviceOp::Kind::kCopy:
      return backend
          ->CopyToHostAsync(*first->memory, first->reg.memory.offset + op.sources[0].second,
                            op.dst, op.size, *op.stream)
          .WithContext(what);
    case DeviceOp::Kind::kXor: {
      std::vector<const kernels::ImportedMemory*> srcs;
      std::vector<uint64_t> offsets;
      for (const auto& [b, off] : op.sources) {
        srcs.push_back(b->memory.get());
        offsets.push_back(b->reg.memory.offset + off);
      }
      return backend
          ->XorToHostAsync(srcs.data(), offsets.data(), srcs.size(), op.dst, op.size, *op.stream)
          .WithContext("AEC parity from '" + first->reg.name + "'");
    }
    case DeviceOp::Kind::kRs: {
      // No device RS kernel: the stripe's sources come to the host and ISA-L encodes there
      // (r·L bytes over the link instead of L/(m−r)); AEC, the common case, stays on the device.
      std::vector<std::vector<uint8_t>> host(op.sources.size());
      std::vector<const uint8_t*> data;
      for (size_t i = 0; i < op.sources.size(); ++i) {
        host[i].assign(op.size, 0);
        const auto& [b, off] = op.sources[i];
        if (b != nullptr) {
          REFT_RETURN_NOT_OK(b->backend->CopyToHostAsync(*b->memory, b->reg.memory.offset + off,
                                                         host[i].data(), op.size, *op.stream));
        }
        data.push_back(host[i].data());
      }
      REFT_RETURN_NOT_OK(op.stream->Synchronize().WithContext("RS sources"));
      return plan_->rs->EncodeRow(op.rs_row, data.data(), op.dst, op.size);
    }
  }
  return Status::Internal("unknown device op");
}

Status SnapshotWriter::PullDevice(const store::SlotRef& slot,
                           const std::vector<kernels::EventExport>& ready,
                           const std::vector<std::pair<int, int>>& ready_keys) {
  REFT_ASSIGN_OR_RETURN(std::vector<DeviceOp> ops, DeviceOps(slot));
  REFT_RETURN_NOT_OK(WaitReadyEvents(ops, ready, ready_keys));
  std::vector<kernels::CopyStream*> used;
  Status issued;
  for (const auto& op : ops) {
    issued = IssueOp(op);
    if (!issued.ok()) break;
    if (std::find(used.begin(), used.end(), op.stream) == used.end()) used.push_back(op.stream);
  }
  // Synchronise everything queued even after an error: the slot must not be reused under a copy.
  for (auto* s : used) {
    Status st = s->Synchronize();
    if (issued.ok()) issued = st;
  }
  return issued;
}

}  // namespace reft::local
