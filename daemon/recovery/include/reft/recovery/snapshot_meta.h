#pragma once
/// \file snapshot_meta.h
/// \brief Reading the "meta" region of located slots (what a snapshot's regions mean), and
/// naming how a restarted trainer's declared meta differs from the snapshot's.

#include <chrono>
#include <string>
#include <vector>

#include "reft/protect/slot_meta.h"
#include "reft/recovery/cluster_view.h"
#include "reft/recovery/region_reader.h"

namespace reft::recovery {

/// \brief A slot meta and where it was read.
struct LocatedMeta {
  protect::SlotMeta meta;           ///< as stored (coord = the slot's rank)
  const SlotEntry* from = nullptr;  ///< the slot it was read from
  uint64_t region_size = 0;         ///< size of that slot's "meta" region
  uint64_t encoded_size = 0;        ///< JSON bytes in it (the rest is zero padding)
};

/// \brief Parses a "meta" region: JSON (SlotMeta::Decode), optionally followed by zero padding.
Result<protect::SlotMeta> DecodeMetaRegion(const uint8_t* data, uint64_t size,
                                           uint64_t* encoded_size = nullptr);

/// \brief Reads and decodes "meta" from the first of `candidates` that serves a valid one whose
/// job and coordinates match the slot it lives in. NotFound when there is no candidate; else the
/// error of every candidate (Corrupted, Unavailable, ...) in one message.
Result<LocatedMeta> ReadSnapshotMeta(const std::vector<const SlotEntry*>& candidates,
                                     const RegionReader& reader,
                                     std::chrono::steady_clock::time_point deadline);


}  // namespace reft::recovery
