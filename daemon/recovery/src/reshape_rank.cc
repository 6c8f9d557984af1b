/// \file reshape_rank.cc
/// \brief ReshapeRank: one rank of a new layout restored from a step saved under another.

#include <algorithm>

#include "reft/mapped_memfd.h"
#include "reft/recovery/reshape.h"
#include "state_layout.h"

namespace reft::recovery {

namespace {

using protect::BufferKind;
using protect::BufferSpec;

std::string Bytes(uint64_t n) { return std::to_string(n) + " bytes"; }

// The global byte range [begin, end) of the saved buffer `saved` that `want` restores, or
// InvalidArgument naming the mismatch. A replicated or unsharded buffer takes the whole saved
// buffer (same size); a sharded one its part of the saved global buffer (same total).
Status RangeOf(const BufferSpec& want, const BufferSpec& saved, uint64_t* begin, uint64_t* end) {
  const std::string at = "buffer '" + want.name + "': ";
  if (want.dtype != saved.dtype) {
    return Status::InvalidArgument(at + "dtype " + want.dtype + ", saved as " + saved.dtype);
  }
  const uint64_t saved_total = saved.sharded() ? saved.shard_total : saved.size;
  if (want.sharded()) {
    if (want.shard_total != saved_total) {
      return Status::InvalidArgument(at + "a part of a global buffer of " +
                                     Bytes(want.shard_total) + ", saved with " +
                                     Bytes(saved_total));
    }
    *begin = want.shard_offset;
    *end = want.shard_offset + want.ShardValid();
    return Status::OK();
  }
  if (want.size != saved_total) {
    return Status::InvalidArgument(at + Bytes(want.size) + ", saved with " + Bytes(saved_total));
  }
  *begin = 0;
  *end = want.size;
  return Status::OK();
}

}  // namespace

Result<std::vector<RangeRequest>> RemapRanges(const BufferSpec& want, const SavedBuffer& saved,
                                              std::vector<local::RestoreRequest::Segment> segments,
                                              int tp, uint8_t* dst) {
  const std::string at = "buffer '" + want.name + "': ";
  if (saved.spec.kind == BufferKind::kUnique && !saved.spec.sharded()) {
    return Status::InvalidArgument(at + "was saved per rank (unique without a shard): it has no "
                                        "global byte ranges to remap");
  }
  if (want.dtype != saved.spec.dtype) {
    return Status::InvalidArgument(at + "dtype " + want.dtype + ", saved as " + saved.spec.dtype);
  }
  const uint64_t saved_total = saved.spec.sharded() ? saved.spec.shard_total : saved.spec.size;
  std::sort(segments.begin(), segments.end(),
            [](const auto& a, const auto& b) { return a.dst < b.dst; });
  std::vector<RangeRequest> out;
  uint64_t filled_to = 0;  // every destination byte below this one is taken
  for (const auto& seg : segments) {
    const std::string which = at + "remap segment {src " + std::to_string(seg.src) + ", dst " +
                              std::to_string(seg.dst) + ", length " + std::to_string(seg.length) +
                              "} ";
    if (seg.length == 0) continue;
    if (seg.dst > want.size || seg.length > want.size - seg.dst) {
      return Status::InvalidArgument(which + "ends past the registered " + Bytes(want.size));
    }
    if (seg.src > saved_total || seg.length > saved_total - seg.src) {
      return Status::InvalidArgument(which + "ends past the saved " + Bytes(saved_total));
    }
    if (seg.dst < filled_to) {
      return Status::InvalidArgument(which + "overlaps another segment's destination");
    }
    filled_to = seg.dst + seg.length;
    if (!out.empty() && out.back().end == seg.src &&
        out.back().dst + (out.back().end - out.back().begin) == dst + seg.dst) {
      out.back().end += seg.length;  // contiguous on both sides: one request
      continue;
    }
    RangeRequest r;
    r.name = want.name;
    r.begin = seg.src;
    r.end = seg.src + seg.length;
    r.dst = dst + seg.dst;
    r.tp = tp;
    out.push_back(std::move(r));
  }
  return out;
}

Result<local::RestoredState> ReshapeRank(const protect::SlotMeta& meta, const StepCatalog& catalog,
                                         const RangeAssembler& assemble,
                                         const local::RestoreRequest& request) {
  if (!request.reads.empty()) return ReadSavedRanges(catalog, assemble, request);
  REFT_ASSIGN_OR_RETURN(protect::SgGeometry g, meta.Geometry());
  StateLayout state = ComputeStateLayout(meta, g);
  const std::string what = "rank " + meta.coord.ToString() + " of layout " +
                           meta.layout.ToString() + " from step " +
                           std::to_string(catalog.step) + " saved under layout " +
                           catalog.layout.ToString();
  if (!request.remap.empty() && request.remap_layout != catalog.layout.ToString()) {
    return Status::Busy("step " + std::to_string(catalog.step) + " of job '" + catalog.job +
                        "' was saved under layout " + catalog.layout.ToString() +
                        ", the remap was computed for layout '" + request.remap_layout +
                        "': probe again and recompute it");
  }
  for (const auto& [name, segments] : request.remap) {
    const bool registered =
        std::any_of(meta.buffers.begin(), meta.buffers.end(),
                    [&name = name](const BufferSpec& b) { return b.name == name; });
    if (!registered) {
      return Status::InvalidArgument("the remap names buffer '" + name +
                                     "', which this trainer did not register");
    }
  }
  REFT_ASSIGN_OR_RETURN(MappedMemfd mem, MappedMemfd::Create("reft-reshape " + what, state.size));

  local::RestoredState out;
  std::vector<RangeRequest> requests;
  for (const BufferSpec& b : meta.buffers) {
    RangeRequest r;
    r.name = b.name;
    r.tp = meta.coord.tp;
    r.dst = mem.data() + state.offsets.at(b.name);
    const SavedBuffer* saved = nullptr;
    if (auto remap = request.remap.find(b.name); remap != request.remap.end()) {
      if (!remap->second.empty()) {
        auto found = catalog.Find(b.name, meta.coord.tp);
        if (!found.ok()) return Status::InvalidArgument(found.status().message());
        REFT_ASSIGN_OR_RETURN(auto ranges,
                              RemapRanges(b, **found, remap->second, meta.coord.tp, r.dst));
        for (auto& range : ranges) requests.push_back(std::move(range));
      }
      out.filled.push_back(b.name);
      continue;
    }
    if (b.kind == BufferKind::kUnique && !b.sharded()) {
      // Per-rank state (RNG, data-loader position): only the same coordinates have it.
      auto at = catalog.Find(b.name, meta.coord.tp, meta.coord.pp);
      saved = at.ok() ? *at : nullptr;
      if (saved == nullptr || saved->spec.sharded() || saved->spec.kind != BufferKind::kUnique ||
          meta.coord.dp >= catalog.layout.dp) {
        out.untouched.push_back(b.name);
        continue;
      }
      r.pp = meta.coord.pp;
      r.dp = meta.coord.dp;
    } else {
      auto found = catalog.Find(b.name, meta.coord.tp);
      if (!found.ok()) return Status::InvalidArgument(found.status().message());
      saved = *found;
      if (saved->spec.kind == BufferKind::kUnique && !saved->spec.sharded()) {
        return Status::InvalidArgument("buffer '" + b.name + "' is " +
                                       (b.sharded() ? "sharded" : "replicated") +
                                       " here but was saved per rank (unique without a shard): "
                                       "it cannot be reshaped");
      }
    }
    REFT_RETURN_NOT_OK(RangeOf(b, saved->spec, &r.begin, &r.end));
    out.filled.push_back(b.name);
    requests.push_back(std::move(r));
  }

  std::string where;
  REFT_RETURN_NOT_OK(assemble(requests, &where));
  for (const auto& name : out.untouched) state.offsets.erase(name);
  out.step = catalog.step;
  out.reshaped = true;
  out.from_layout = catalog.layout.ToString();
  out.size = mem.size();
  out.offsets = std::move(state.offsets);
  out.fd = mem.Release();
  out.detail = what + " by name: " + where;
  if (!out.untouched.empty()) {
    std::string names;
    for (const auto& n : out.untouched) names += (names.empty() ? "" : ", ") + n;
    out.detail += "; untouched (per-rank, coordinates not in the saved layout): " + names;
  }
  return out;
}

}  // namespace reft::recovery
