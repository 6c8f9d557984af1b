#pragma once
/// \file sealed_checksums.h
/// \brief Reads a slot's sealed per-chunk checksums (segment_layout.h chunk table) for one
/// region, so the Peer service can check bytes against what Seal() recorded before serving
/// them, and publish them in manifests. The SlotRef interface does not expose the table; the
/// segment format is public and C-compatible, so we read it through the slot's fd.

#include <cstdint>
#include <vector>

#include "reft/result.h"
#include "reft/store/snapshot_store.h"

namespace reft::peer {

struct SealedChecksums {
  uint64_t chunk_size = 0;
  std::vector<uint64_t> chunks;  ///< XXH3-64 of chunk i of the region
};

Result<SealedChecksums> ReadSealedChecksums(const store::SlotRef& slot, size_t region);

}  // namespace reft::peer
