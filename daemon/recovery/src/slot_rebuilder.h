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

#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "reft/protect/codec.h"
#include "reft/protect/slot_meta.h"
#include "reft/recovery/cluster_view.h"
#include "reft/recovery/fetcher.h"
#include "xor_accumulator.h"
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

/// \brief One slot being regenerated, in three steps: Begin (the ring neighbour's unique
/// buffers, a writing slot, its meta region), filling the rep/* and unique/* regions, Finish
/// (peer copies, seal, commit). The regions are filled either from the assembled state
/// (FillFromCanonical: any scheme) or from a restore's stream as it passes (Capture: schemes
/// without RS, where every rep/* region is a range of the state or, for AEC, a XOR of ranges,
/// so a replacement node that streams its rank's restore never holds the whole state).
/// Destroying a rebuild that did not finish discards the partial slot.
class SlotRebuild {
 public:
  /// `pages`: who populates a new segment (store::NewPages). Filling from the canonical vector
  /// writes everything at once and wants kByStore; capturing a stream wants kByWriter, so that
  /// the new pages are allocated as the pieces arrive rather than before the first one.
  static Result<std::unique_ptr<SlotRebuild>> Begin(
      store::SnapshotStore* store, const ClusterView& view, Fetcher* fetcher,
      const protect::SlotMeta& meta, const protect::SgGeometry& geometry, int64_t step,
      uint64_t meta_region_size, std::chrono::steady_clock::time_point deadline,
      store::NewPages pages);
  ~SlotRebuild();
  SlotRebuild(const SlotRebuild&) = delete;
  SlotRebuild& operator=(const SlotRebuild&) = delete;

  /// \brief rep/* encoded from the canonical vector, unique/* from `unique` (a rebuild begun
  /// with NewPages::kByStore: the encoder writes without populating).
  Status FillFromCanonical(const uint8_t* canonical,
                           const std::map<std::string, protect::ConstSpan>& unique);

  /// \brief Whether Capture can fill the slot of `meta` (no RS parity: copies and AEC XORs).
  static bool Capturable(const protect::SlotMeta& meta);
  /// \brief Where each rep/* and unique/* region comes from in the state laid out as
  /// `state_offsets` (RestoredState::offsets). Call once before Capture.
  Status PrepareCapture(const std::map<std::string, uint64_t>& state_offsets);
  /// \brief Copies the parts of state bytes [offset, offset+size) that belong in the slot and
  /// adds those the AEC parity reads into it. Thread-safe; each state byte passes once.
  Status Capture(uint64_t offset, const uint8_t* data, uint64_t size);

  /// \brief Seals and commits the slot (Internal when a captured region was not covered).
  Status Finish(RestoreStats* stats);

 private:
  SlotRebuild() = default;
  Status Encode(const uint8_t* canonical, const std::map<std::string, protect::ConstSpan>& unique);
  struct Range {  // state bytes [from, from+size) go to slot bytes at `to`
    uint64_t from = 0;
    uint64_t size = 0;
    uint8_t* to = nullptr;
  };
  store::SnapshotStore* store_ = nullptr;
  store::RankKey key_;
  std::string what_;
  protect::SlotMeta meta_;
  protect::SgGeometry geometry_;
  int64_t step_ = -1;
  std::shared_ptr<store::SlotRef> slot_;
  std::map<std::string, std::vector<uint8_t>> neighbour_;  // dp+1's unique buffers
  std::vector<Range> ranges_;
  XorAccumulator parity_;  // the AEC region, when the scheme has one
  std::atomic<uint64_t> captured_{0};
  uint64_t to_capture_ = 0;
  bool finished_ = false;
  std::chrono::nanoseconds spent_{0};  // in Begin and FillFromCanonical
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
