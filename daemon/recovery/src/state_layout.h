#pragma once
/// \file state_layout.h
/// \brief Where each buffer lies in a restored state's memfd (RestoredState::offsets): the SG's
/// canonical replicated vector at offset 0 (buffers back to back in name order, so assembled
/// shards land in place), then each unique buffer at a 4 KiB boundary. The same for a restore
/// from memory and from the persistent tier.

#include <cstdint>
#include <map>
#include <string>

#include "reft/protect/sharding.h"
#include "reft/protect/slot_meta.h"

namespace reft::recovery {

struct StateLayout {
  std::map<std::string, uint64_t> offsets;  ///< buffer name -> byte offset
  uint64_t size = 0;                        ///< bytes of the memfd
};

/// \brief Size of buffer `name` in `meta` (0 when it has no such buffer).
uint64_t BufferSize(const protect::SlotMeta& meta, const std::string& name);

/// \brief The layout for the rank `meta` describes (`g` = its SG geometry).
StateLayout ComputeStateLayout(const protect::SlotMeta& meta, const protect::SgGeometry& g);

}  // namespace reft::recovery
