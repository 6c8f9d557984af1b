#pragma once
/// \file sealed_checksums.h
/// \brief Reads a slot's sealed per-chunk checksums (segment_layout.h chunk table) for one
/// region, so the Peer service can check bytes against what Seal() (or Publish()) recorded
/// before serving them and publish them in manifests, and the recovery layer can verify bytes it
/// reads from its own store. The SlotRef interface does not expose the table; the segment format
/// is public and C-compatible, so we read it through the slot's fd.

#include <cstdint>
#include <string>
#include <vector>

#include "reft/result.h"
#include "reft/store/snapshot_store.h"

namespace reft::peer {

struct SealedChecksums {
  uint64_t chunk_size = 0;
  std::vector<uint64_t> chunks;  ///< XXH3-64 of chunk i of the region
};

/// \brief The chunk size and the checksums of every chunk of region `region` of `slot`.
/// IoError/Corrupted when the segment file cannot be read or its tables are inconsistent.
Result<SealedChecksums> ReadSealedChecksums(const store::SlotRef& slot, size_t region);

/// \brief Checks bytes [offset, offset+size) of region `region` of `slot` against its sealed
/// checksums, whole chunks at a time (every chunk the range touches is hashed entirely).
/// Corrupted naming the region, chunk and byte range of the first mismatch; `where` names the
/// slot in messages (e.g. "node 'n1'").
Status VerifySealedRange(const store::SlotRef& slot, size_t region, uint64_t offset,
                         uint64_t size, const std::string& where);

}  // namespace reft::peer
