#pragma once
/// \file segment_layout.h
/// \brief The on-disk (tmpfs) format of one snapshot segment. C-compatible: plain structs of
/// fixed-width fields, little-endian, no pointers, so tools and other languages can read it.
///
/// File layout (all offsets absolute, see docs/store.md):
///
///   [0, 512)                          reft_segment_header (fixed part + two state records)
///   [region_table_offset, ...)        region_count x reft_segment_region (160 bytes each)
///   [chunk_table_offset, ...)         chunk_count x uint64_t XXH3-64 (reft::Checksum64) per chunk
///   [payload_offset, segment_bytes)   regions back to back, each starting on a 4 KiB boundary
///
/// Integrity is split in two so that every state transition is a single small write:
///  - `layout_checksum` covers the fixed part of the header before it and the region table.
///    It is written when the segment is created or re-laid-out (only while the slot holds no
///    complete data), so a torn layout write can only lose a slot that held nothing.
///  - The slot state lives in two 64-byte records A/B, each with its own checksum. A transition
///    writes the *inactive* record with seqno+1; the valid record with the highest seqno is
///    the current state. A SIGKILL in the middle of the write leaves that record invalid and the
///    other one (the previous state) in force: every transition is either fully done or not
///    at all. For complete/committed records `chunk_table_checksum` pins the chunk table, which
///    is written (while the slot is still `writing`) before the record that publishes it.

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/// "REFTSEG1" read as a little-endian uint64.
#define REFT_SEGMENT_MAGIC 0x3147455354464552ULL
/// Bump on any incompatible change; a daemon quarantines segments of another version.
#define REFT_SEGMENT_LAYOUT_VERSION 1u
#define REFT_SEGMENT_HEADER_SIZE 512u
#define REFT_SEGMENT_JOB_MAX 64u          /* bytes of a job id, without the NUL */
#define REFT_SEGMENT_REGION_NAME_MAX 127u /* bytes of a region name, without the NUL */
#define REFT_SEGMENT_PAYLOAD_ALIGN 4096u  /* payload and every region start on this boundary */

/// Slot states as stored (same numbers as reft::store::SlotState).
enum reft_segment_state {
  REFT_SEGMENT_FREE = 0,
  REFT_SEGMENT_WRITING = 1,
  REFT_SEGMENT_COMPLETE = 2,
  REFT_SEGMENT_COMMITTED = 3,
};

/// One state record (64 bytes). Valid when `seqno != 0` and `checksum` equals
/// Checksum64 of the 56 bytes before it.
typedef struct reft_segment_state_record {
  uint64_t seqno;                 ///< transition counter; the higher valid record wins
  uint32_t state;                 ///< enum reft_segment_state
  uint32_t reserved0;
  int64_t step;                   ///< -1 when free
  uint64_t chunk_table_checksum;  ///< Checksum64 of the chunk table (complete/committed only)
  uint64_t reserved1[3];
  uint64_t checksum;              ///< Checksum64 of bytes [0, 56) of this record
} reft_segment_state_record;

typedef struct reft_segment_header {
  uint64_t magic;                 ///< REFT_SEGMENT_MAGIC
  uint32_t layout_version;        ///< REFT_SEGMENT_LAYOUT_VERSION
  uint32_t header_size;           ///< REFT_SEGMENT_HEADER_SIZE
  uint64_t segment_bytes;         ///< file size
  uint64_t payload_offset;        ///< first payload byte (multiple of REFT_SEGMENT_PAYLOAD_ALIGN)
  uint64_t payload_bytes;         ///< sum of region sizes (without alignment padding)
  uint64_t chunk_size;            ///< checksum granularity, power of two >= 4096
  uint64_t chunk_count;           ///< entries in the chunk table
  uint64_t region_table_offset;   ///< == header_size
  uint64_t chunk_table_offset;
  uint32_t region_count;
  uint32_t slot_index;            ///< slot number of the rank (also in the file name)
  int32_t pp;                     ///< rank coordinates at save time
  int32_t tp;
  int32_t dp;
  uint32_t job_len;               ///< bytes of `job` used
  char job[72];                   ///< job id, NUL-padded (at most REFT_SEGMENT_JOB_MAX bytes)
  uint8_t reserved[208];
  uint64_t layout_checksum;       ///< Checksum64(header[0, offsetof(layout_checksum)) ++ region table)
  reft_segment_state_record records[2];
} reft_segment_header;

/// One region (160 bytes). Regions are in payload order; their chunks are consecutive in the
/// chunk table starting at `first_chunk` (chunk i covers bytes [i*chunk_size, ...) of the region).
typedef struct reft_segment_region {
  char name[128];                 ///< NUL-padded
  uint64_t offset;                ///< absolute file offset of the region's first byte
  uint64_t size;                  ///< bytes
  uint64_t first_chunk;
  uint64_t chunk_count;           ///< ceil(size / chunk_size)
} reft_segment_region;

#ifdef __cplusplus
}  // extern "C"
static_assert(sizeof(reft_segment_state_record) == 64, "state record is 64 bytes");
static_assert(sizeof(reft_segment_header) == REFT_SEGMENT_HEADER_SIZE, "header is 512 bytes");
static_assert(offsetof(reft_segment_header, records) == REFT_SEGMENT_HEADER_SIZE - 128,
              "records are the last 128 bytes");
static_assert(sizeof(reft_segment_region) == 160, "region entry is 160 bytes");
#endif
