#pragma once
/// \file segment_format.h
/// \brief Reading and writing the segment header of segment_layout.h: geometry of a layout,
/// layout write, state-record transitions, and the strict parser used on adoption (segments
/// are read back after crashes and treated as untrusted input).

#include <cstdint>
#include <optional>
#include <vector>

#include "reft/result.h"
#include "reft/store/segment_layout.h"
#include "reft/store/snapshot_store.h"

namespace reft::store::internal {

/// \brief Where everything of a layout lives in the file.
struct Geometry {
  uint64_t chunk_size = 0;
  uint64_t region_table_offset = 0;
  uint64_t chunk_table_offset = 0;
  uint64_t chunk_count = 0;
  uint64_t payload_offset = 0;
  uint64_t payload_bytes = 0;
  uint64_t segment_bytes = 0;
  std::vector<reft_segment_region> regions;  ///< names, offsets, sizes, chunk ranges
};

/// \brief Computes the geometry of `layout` (already validated) for `chunk_size`.
Geometry ComputeGeometry(const std::vector<RegionSpec>& layout, uint64_t chunk_size);

/// \brief Writes the fixed header part, region table and layout checksum. The state records
/// are left untouched (the caller publishes the state with WriteRecord afterwards).
void WriteLayout(uint8_t* base, const Geometry& g, const RankKey& rank, uint32_t slot);

/// \brief The record in force: the valid record with the highest seqno.
struct ActiveRecord {
  int index = -1;  ///< -1: no valid record (a fresh segment; state free)
  uint64_t seqno = 0;
  SlotState state = SlotState::kFree;
  int64_t step = -1;
  uint64_t chunk_table_checksum = 0;
};
ActiveRecord ReadActiveRecord(const reft_segment_header* h);

/// \brief Publishes a new state: writes the inactive record with seqno+1 between two full
/// fences, so a SIGKILL leaves either `current` or the new state in force. Returns the new one.
ActiveRecord WriteRecord(reft_segment_header* h, const ActiveRecord& current, SlotState state,
                         int64_t step, uint64_t chunk_table_checksum);

/// \brief Checksum64 of the chunk table.
uint64_t ChunkTableChecksum(const uint8_t* base, const Geometry& g);

/// \brief What a header says, after every field was cross-checked.
struct ParsedSegment {
  RankKey rank;
  uint32_t slot = 0;
  std::vector<RegionSpec> layout;
  Geometry geometry;
  ActiveRecord record;
};
/// \brief Parses and validates the header of a mapped file of `file_size` bytes. Corrupted
/// with the reason when anything does not check out (magic, version, sizes, offsets,
/// names, layout checksum, record state).
Result<ParsedSegment> ParseSegment(const uint8_t* base, uint64_t file_size);

/// \brief True if the first header bytes are all zero (a creation interrupted before the
/// layout was written: nothing was ever stored in it).
bool HeaderIsBlank(const uint8_t* base, uint64_t file_size);

}  // namespace reft::store::internal
