/// \file slot_rebuilder.cc
/// \brief Regenerating a lost rank's slot on this node from its assembled state.

#include "slot_rebuilder.h"

#include <algorithm>
#include <cstring>

#include "reft/protect/segments.h"
#include "reft/protect/sharding.h"
#include "group_assembler.h"
#include "state_layout.h"

namespace reft::recovery {

namespace {
using Clock = std::chrono::steady_clock;
}  // namespace

std::vector<uint8_t> MetaRegionBytes(const protect::SlotMeta& meta, uint64_t region_size) {
  std::vector<uint8_t> bytes = meta.Encode();
  if (region_size > bytes.size()) bytes.resize(region_size, 0);
  return bytes;
}

Result<std::unique_ptr<SlotRebuild>> SlotRebuild::Begin(
    store::SnapshotStore* store, const ClusterView& view, Fetcher* fetcher,
    const protect::SlotMeta& meta, const protect::SgGeometry& geometry, int64_t step,
    uint64_t meta_region_size, Clock::time_point deadline, store::NewPages pages) {
  const auto t0 = Clock::now();
  std::unique_ptr<SlotRebuild> r(new SlotRebuild());
  r->store_ = store;
  r->meta_ = meta;
  r->geometry_ = geometry;
  r->step_ = step;
  r->key_ = MemberRank(meta, meta.coord.dp);
  r->what_ = r->key_.ToString() + " step " + std::to_string(step);
  const std::string& what = r->what_;
  REFT_ASSIGN_OR_RETURN(protect::RankPlan plan, meta.Plan());
  const protect::SgGeometry& g = geometry;
  const int m = g.m;

  // 1. The ring neighbour's unique buffers, before anything is written.
  if (m >= 2 && !g.unique.empty()) {
    const int next = (meta.coord.dp + 1) % m;
    std::vector<FetchItem> items;
    for (const auto& name : g.unique) {
      uint64_t size = 0;
      for (const auto& region : plan.regions) {
        if (region.name == protect::PeerRegionName(name) ||
            region.name == protect::AorRegionName(name)) {
          size = region.size;
        }
      }
      auto& buf = r->neighbour_[name];
      buf.resize(size);
      FetchItem it;
      it.what = "unique/" + name + " of dp" + std::to_string(next) + " (for the peer copy of " +
                what + ")";
      it.dst = buf.data();
      it.size = size;
      for (const SlotEntry* s : view.Find(MemberRank(meta, next), step)) {
        const RegionEntry* e = s->Region(protect::UniqueRegionName(name));
        if (e != nullptr && e->size == size) {
          it.sources.push_back({s, protect::UniqueRegionName(name), 0, ByteKind::kUnique});
        }
      }
      items.push_back(std::move(it));
    }
    (void)fetcher->Run(&items, deadline);  // results per item
    for (const auto& it : items) {
      if (!it.status.ok()) {
        return Status::Lost("cannot regenerate the slot of " + what + ": the peer copy of rank dp" +
                            std::to_string(next) + "'s unique buffers is needed and " +
                            it.status.message() +
                            "; the slot is not rebuilt (a wrong peer copy would later be restored "
                            "silently), the rank's next snapshot protects it again");
      }
    }
  }

  // 2. A writing slot with its meta region.
  std::vector<store::RegionSpec> layout;
  const std::vector<uint8_t> meta_bytes = MetaRegionBytes(meta, meta_region_size);
  layout.push_back({protect::kRegionMeta, meta_bytes.size()});
  for (const auto& region : plan.regions) layout.push_back({region.name, region.size});
  REFT_RETURN_NOT_OK(store->ConfigureRank(r->key_, layout).WithContext("rebuilding " + what));
  // Captured from a stream, the slot's pages are populated as its bytes arrive (Populate before
  // each write): a replacement's slot is new memory, and allocating it whole before the stream
  // started stood in front of the restore (docs/bench/recovery.md).
  REFT_ASSIGN_OR_RETURN(r->slot_, store->BeginWrite(r->key_, step, pages));
  REFT_ASSIGN_OR_RETURN(size_t mi, r->slot_->FindRegion(protect::kRegionMeta));
  REFT_RETURN_NOT_OK(r->slot_->Populate(r->slot_->region_data(mi), meta_bytes.size()));
  std::memcpy(r->slot_->region_data(mi), meta_bytes.data(), meta_bytes.size());
  r->spent_ = Clock::now() - t0;
  return r;
}

SlotRebuild::~SlotRebuild() {
  if (finished_ || slot_ == nullptr) return;
  slot_.reset();
  (void)store_->Abort(key_, step_);  // a rebuild given up on leaves no partial slot
}

Status SlotRebuild::FillFromCanonical(const uint8_t* canonical,
                                      const std::map<std::string, protect::ConstSpan>& unique) {
  const auto t0 = Clock::now();
  Status st = Encode(canonical, unique);
  spent_ += Clock::now() - t0;  // the encode counts as rebuild time
  return st;
}

Status SlotRebuild::Encode(const uint8_t* canonical,
                           const std::map<std::string, protect::ConstSpan>& unique) {
  const protect::SgGeometry& g = geometry_;
  protect::ReplicatedSource source;
  for (const auto& b : g.buffers) source[b.name] = {canonical + b.offset, b.size};
  std::map<std::string, protect::MutableSpan> rep;
  for (size_t i = 0; i < slot_->info().regions.size(); ++i) {
    const std::string& name = slot_->info().regions[i].name;
    if (name.rfind("rep/", 0) == 0) rep[name] = {slot_->region_data(i), slot_->region_size(i)};
  }
  REFT_RETURN_NOT_OK(protect::EncodeMember(g, meta_.scheme, meta_.coord.dp, source, rep, 1, false));
  for (const auto& name : g.unique) {
    auto it = unique.find(name);
    if (it == unique.end()) {
      return Status::Internal("assembled state of " + what_ + " lacks unique buffer '" + name +
                              "'");
    }
    REFT_ASSIGN_OR_RETURN(size_t ui, slot_->FindRegion(protect::UniqueRegionName(name)));
    if (slot_->region_size(ui) != it->second.size) {
      return Status::Internal("unique buffer '" + name + "' size mismatch in " + what_);
    }
    if (it->second.size > 0) std::memcpy(slot_->region_data(ui), it->second.data, it->second.size);
  }
  return Status::OK();
}

bool SlotRebuild::Capturable(const protect::SlotMeta& meta) { return meta.scheme.rs == 0; }

Status SlotRebuild::PrepareCapture(const std::map<std::string, uint64_t>& state_offsets) {
  if (!Capturable(meta_)) {
    return Status::Internal("the slot of " + what_ + " holds RS parity: it cannot be captured");
  }
  const protect::SgGeometry& g = geometry_;
  const int dp = meta_.coord.dp;
  auto add = [&](const std::string& region, uint64_t from, uint64_t size) -> Status {
    REFT_ASSIGN_OR_RETURN(size_t i, slot_->FindRegion(region));
    if (slot_->region_size(i) != size) {
      return Status::Internal("region '" + region + "' of " + what_ + " has " +
                              std::to_string(slot_->region_size(i)) + " bytes, the state " +
                              std::to_string(size));
    }
    ranges_.push_back({from, size, slot_->region_data(i)});
    to_capture_ += size;
    return Status::OK();
  };
  REFT_RETURN_NOT_OK(add(protect::kRegionShard, g.shard_begin[dp], g.ShardSize(dp)));
  for (int o = 1; o <= meta_.scheme.arc && o < g.m; ++o) {
    const int j = (dp + o) % g.m;
    REFT_RETURN_NOT_OK(add(protect::ArcRegionName(o), g.shard_begin[j], g.ShardSize(j)));
  }
  for (const auto& name : g.unique) {
    auto at = state_offsets.find(name);
    if (at == state_offsets.end()) {
      return Status::Internal("the state of " + what_ + " has no unique buffer '" + name + "'");
    }
    REFT_RETURN_NOT_OK(add(protect::UniqueRegionName(name), at->second, BufferSize(meta_, name)));
  }
  if (meta_.scheme.aec) {
    // The AEC parity is a XOR of state ranges: it starts as zero and every passing piece that
    // one of its segments reads is added in (padding adds nothing).
    REFT_ASSIGN_OR_RETURN(size_t i, slot_->FindRegion(protect::kRegionAec));
    if (slot_->region_size(i) != g.aec_sub) {
      return Status::Internal("region '" + std::string(protect::kRegionAec) + "' of " + what_ +
                              " has " + std::to_string(slot_->region_size(i)) +
                              " bytes, the geometry " + std::to_string(g.aec_sub));
    }
    uint8_t* parity = slot_->region_data(i);
    REFT_RETURN_NOT_OK(slot_->Populate(parity, g.aec_sub));
    std::memset(parity, 0, g.aec_sub);
    for (const protect::CodingSegment& seg : protect::AecSegments(g, dp)) {
      for (const protect::SegmentSource& src : seg.sources) {
        if (src.buffer < 0) continue;
        const uint64_t from = g.buffers[static_cast<size_t>(src.buffer)].offset + src.offset;
        parity_.AddTerm(from, seg.size, parity + seg.out_offset);
      }
    }
  }
  return Status::OK();
}

Status SlotRebuild::Capture(uint64_t offset, const uint8_t* data, uint64_t size) {
  for (const Range& r : ranges_) {
    const uint64_t lo = std::max(offset, r.from);
    const uint64_t hi = std::min(offset + size, r.from + r.size);
    if (lo >= hi) continue;
    REFT_RETURN_NOT_OK(slot_->Populate(r.to + (lo - r.from), hi - lo));
    std::memcpy(r.to + (lo - r.from), data + (lo - offset), hi - lo);
    captured_ += hi - lo;
  }
  return parity_.Absorb(offset, data, size);
}

Status SlotRebuild::Finish(RestoreStats* stats) {
  const auto t0 = Clock::now();
  finished_ = true;
  const protect::SgGeometry& g = geometry_;
  auto fill_peer_copies = [&]() -> Status {
    const uint64_t covered = captured_ + parity_.absorbed();
    const uint64_t needed = to_capture_ + parity_.expected();
    if (covered != needed) {
      return Status::Internal("the restore stream covered " + std::to_string(covered) +
                              " of the " + std::to_string(needed) + " bytes of " + what_ +
                              "'s slot");
    }
    if (g.m < 2) return Status::OK();
    for (const auto& name : g.unique) {
      auto pi = slot_->FindRegion(protect::PeerRegionName(name));
      if (!pi.ok()) pi = slot_->FindRegion(protect::AorRegionName(name));
      if (!pi.ok()) return pi.status();
      const auto& nb = neighbour_[name];
      if (slot_->region_size(*pi) != nb.size()) {
        return Status::Internal("peer copy of '" + name + "' size mismatch in " + what_);
      }
      if (nb.empty()) continue;
      REFT_RETURN_NOT_OK(slot_->Populate(slot_->region_data(*pi), nb.size()));
      std::memcpy(slot_->region_data(*pi), nb.data(), nb.size());
    }
    return Status::OK();
  };
  Status st = fill_peer_copies();
  slot_.reset();
  if (st.ok()) st = store_->Seal(key_, step_);
  if (!st.ok()) {
    // A slot that was sealed before the failure is no longer writing: nothing to discard.
    Status aborted = store_->Abort(key_, step_);
    if (!aborted.ok() && aborted.code() != StatusCode::kNotFound) {
      st = st.WithContext("(the partial slot could not be discarded: " + aborted.ToString() + ")");
    }
    return st.WithContext("rebuilding " + what_);
  }
  REFT_RETURN_NOT_OK(store_->Commit(key_, step_).WithContext("rebuilding " + what_));
  // Begin and Finish only: a captured slot's bytes arrived with the restore's fetch.
  if (stats != nullptr) stats->rebuild += spent_ + (Clock::now() - t0);
  return Status::OK();
}

Status RebuildSlot(store::SnapshotStore* store, const ClusterView& view, Fetcher* fetcher,
                   const AssembledRank& rank, RestoreStats* stats, Clock::time_point deadline) {
  REFT_ASSIGN_OR_RETURN(std::unique_ptr<SlotRebuild> rebuild,
                        SlotRebuild::Begin(store, view, fetcher, rank.meta, rank.geometry,
                                           rank.step, rank.meta_region_size, deadline,
                                           store::NewPages::kByStore));
  Status filled = rebuild->FillFromCanonical(rank.canonical, rank.unique);
  if (!filled.ok()) {
    return filled.WithContext("rebuilding " + MemberRank(rank.meta, rank.meta.coord.dp).ToString() +
                              " step " + std::to_string(rank.step));
  }
  return rebuild->Finish(stats);
}

}  // namespace reft::recovery
