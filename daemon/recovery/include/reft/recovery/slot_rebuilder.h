#pragma once
/// \file slot_rebuilder.h
/// \brief Node rebuild (docs/data-paths.md "Rebuild"): regenerates a rank's slot in this node's store
/// from its assembled state, so a replacement node protects the job again.
///
/// The slot follows the slot layout contract: "meta" (the rank's SlotMeta), then
/// SlotMeta::Plan()->regions in order: "rep/shard" and "rep/arc+o" / "rep/aec" / "rep/rs"
/// encoded from the assembled replicated buffers with protect::EncodeMember (the same function
/// the save path uses, so the bytes equal the lost slot's), "unique/<name>" from the assembled
/// unique buffers, and "peer/<name>" / "aor/<name>" copied from rank dp+1's slot of the same
/// step ("unique/<name>"). It is sealed and committed at once: the step is already committed
/// job-wide (the rank's lost slot had completed it).

#include <chrono>
#include <map>
#include <string>

#include "reft/protect/codec.h"
#include "reft/protect/slot_meta.h"
#include "reft/recovery/cluster_view.h"
#include "reft/recovery/fetcher.h"
#include "reft/store/snapshot_store.h"

namespace reft::recovery {

/// \brief A rank's full state at one step, assembled in memory.
struct AssembledRank {
  protect::SlotMeta meta;  ///< the rank's snapshot meta (its own coordinates)
  protect::SgGeometry geometry;
  int64_t step = -1;
  const uint8_t* canonical = nullptr;                ///< geometry.total bytes (replicated)
  std::map<std::string, protect::ConstSpan> unique;  ///< the rank's unique buffers by name
  /// Size of the "meta" region: 0 = exactly the encoded meta; larger = zero-padded to it (the
  /// size the writer used, as seen in a surviving member's slot).
  uint64_t meta_region_size = 0;
};

/// \brief Writes, seals and commits `rank`'s slot in `store` (see the file comment).
/// Lost naming the buffer when rank dp+1's unique buffers cannot be read from any live slot:
/// nothing is written then (a slot whose peer copy were wrong would later restore dp+1
/// silently). Store errors as they come (OutOfMemory, Busy, InvalidArgument when this node
/// already committed a newer step of the rank); a failed write is aborted, never sealed.
Status RebuildSlot(store::SnapshotStore* store, const ClusterView& view, Fetcher* fetcher,
                   const AssembledRank& rank, RestoreStats* stats,
                   std::chrono::steady_clock::time_point deadline);

/// \brief The "meta" region bytes RebuildSlot writes for `meta` (zero-padded to
/// `region_size` when that is larger than the encoding).
std::vector<uint8_t> MetaRegionBytes(const protect::SlotMeta& meta, uint64_t region_size);

}  // namespace reft::recovery
