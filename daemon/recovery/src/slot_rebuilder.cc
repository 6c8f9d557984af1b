/// \file slot_rebuilder.cc
/// \brief Regenerating a lost rank's slot on this node from its assembled state.

#include "reft/recovery/slot_rebuilder.h"

#include <cstring>

#include "reft/protect/sharding.h"
#include "reft/recovery/group_assembler.h"

namespace reft::recovery {

namespace {
using Clock = std::chrono::steady_clock;
}  // namespace

std::vector<uint8_t> MetaRegionBytes(const protect::SlotMeta& meta, uint64_t region_size) {
  std::vector<uint8_t> bytes = meta.Encode();
  if (region_size > bytes.size()) bytes.resize(region_size, 0);
  return bytes;
}

Status RebuildSlot(store::SnapshotStore* store, const ClusterView& view, Fetcher* fetcher,
                   const AssembledRank& rank, RestoreStats* stats, Clock::time_point deadline) {
  const auto t0 = Clock::now();
  const protect::SlotMeta& meta = rank.meta;
  const store::RankKey key = MemberRank(meta, meta.coord.dp);
  const std::string what = key.ToString() + " step " + std::to_string(rank.step);
  REFT_ASSIGN_OR_RETURN(protect::RankPlan plan, meta.Plan());
  const protect::SgGeometry& g = rank.geometry;
  const int m = g.m;

  // 1. The ring neighbour's unique buffers, before anything is written.
  std::map<std::string, std::vector<uint8_t>> neighbour;
  if (m >= 2 && !g.unique.empty()) {
    const int next = (meta.coord.dp + 1) % m;
    std::vector<FetchItem> items;
    for (const auto& name : g.unique) {
      uint64_t size = 0;
      for (const auto& r : plan.regions) {
        if (r.name == protect::PeerRegionName(name) || r.name == protect::AorRegionName(name)) {
          size = r.size;
        }
      }
      auto& buf = neighbour[name];
      buf.resize(size);
      FetchItem it;
      it.what = "unique/" + name + " of dp" + std::to_string(next) + " (for the peer copy of " +
                what + ")";
      it.dst = buf.data();
      it.size = size;
      for (const SlotEntry* s : view.Find(MemberRank(meta, next), rank.step)) {
        const RegionEntry* r = s->Region(protect::UniqueRegionName(name));
        if (r != nullptr && r->size == size) {
          it.sources.push_back({s, protect::UniqueRegionName(name), 0, ByteKind::kUnique});
        }
      }
      items.push_back(std::move(it));
    }
    fetcher->Run(&items, deadline);
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

  // 2. Write the slot: meta, rep/* by the encoder, unique/*, peer/* or aor/*.
  std::vector<store::RegionSpec> layout;
  const std::vector<uint8_t> meta_bytes = MetaRegionBytes(meta, rank.meta_region_size);
  layout.push_back({protect::kRegionMeta, meta_bytes.size()});
  for (const auto& r : plan.regions) layout.push_back({r.name, r.size});
  REFT_RETURN_NOT_OK(store->ConfigureRank(key, layout).WithContext("rebuilding " + what));
  REFT_ASSIGN_OR_RETURN(std::shared_ptr<store::SlotRef> slot, store->BeginWrite(key, rank.step));
  auto fill = [&]() -> Status {
    REFT_ASSIGN_OR_RETURN(size_t mi, slot->FindRegion(protect::kRegionMeta));
    std::memcpy(slot->region_data(mi), meta_bytes.data(), meta_bytes.size());
    protect::ReplicatedSource source;
    for (const auto& b : g.buffers) source[b.name] = {rank.canonical + b.offset, b.size};
    std::map<std::string, protect::MutableSpan> rep;
    for (size_t i = 0; i < slot->info().regions.size(); ++i) {
      const std::string& name = slot->info().regions[i].name;
      if (name.rfind("rep/", 0) == 0) rep[name] = {slot->region_data(i), slot->region_size(i)};
    }
    REFT_RETURN_NOT_OK(protect::EncodeMember(g, meta.scheme, meta.coord.dp, source, rep, 1, false));
    for (const auto& name : g.unique) {
      auto it = rank.unique.find(name);
      if (it == rank.unique.end()) {
        return Status::Internal("assembled state of " + what + " lacks unique buffer '" + name +
                                "'");
      }
      REFT_ASSIGN_OR_RETURN(size_t ui, slot->FindRegion(protect::UniqueRegionName(name)));
      if (slot->region_size(ui) != it->second.size) {
        return Status::Internal("unique buffer '" + name + "' size mismatch in " + what);
      }
      if (it->second.size > 0) std::memcpy(slot->region_data(ui), it->second.data, it->second.size);
      if (m < 2) continue;
      auto pi = slot->FindRegion(protect::PeerRegionName(name));
      if (!pi.ok()) pi = slot->FindRegion(protect::AorRegionName(name));
      if (!pi.ok()) return pi.status();
      const auto& nb = neighbour[name];
      if (slot->region_size(*pi) != nb.size()) {
        return Status::Internal("peer copy of '" + name + "' size mismatch in " + what);
      }
      if (!nb.empty()) std::memcpy(slot->region_data(*pi), nb.data(), nb.size());
    }
    return Status::OK();
  };
  Status st = fill();
  slot.reset();
  if (st.ok()) st = store->Seal(key, rank.step);
  if (!st.ok()) {
    // A slot that was sealed before the failure is no longer writing: nothing to discard.
    Status aborted = store->Abort(key, rank.step);
    if (!aborted.ok() && aborted.code() != StatusCode::kNotFound) {
      st = st.WithContext("(the partial slot could not be discarded: " + aborted.ToString() + ")");
    }
    return st.WithContext("rebuilding " + what);
  }
  REFT_RETURN_NOT_OK(store->Commit(key, rank.step).WithContext("rebuilding " + what));
  if (stats != nullptr) stats->rebuild += Clock::now() - t0;
  return Status::OK();
}

}  // namespace reft::recovery
