#pragma once
/// \file persisted_rank.h
/// \brief Read access to one persisted rank file (made by PersistentTier::OpenRank).

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "reft/result.h"
#include "reft/store/segment_image.h"
#include "reft/token_bucket.h"

namespace reft::persist {

/// \brief A rank file whose header, region table and chunk table were verified at open, and
/// whose payload is verified chunk by chunk as it is read.
///
/// Owns an open fd: the bytes stay readable even if retention deletes the step afterwards.
/// Thread-safe: all methods are const; concurrent reads (of any regions) are fine. Reads take
/// tokens from the tier's read bucket (PersistOptions::read_bandwidth), shared with the tier.
class PersistedRank {
 public:
  /// \brief Used by PersistentTier::OpenRank; `bucket` may be null (unlimited).
  PersistedRank(std::unique_ptr<store::SegmentImageReader> reader,
                std::shared_ptr<TokenBucket> bucket);

  const store::RankKey& rank() const;
  int64_t step() const;
  const std::string& path() const;
  const std::vector<store::RegionSpec>& regions() const;  ///< names and sizes, in file order
  uint64_t file_bytes() const;
  uint64_t chunk_table_checksum() const;  ///< equals the manifest entry of the file
  /// \brief Size of `region`, or NotFound listing the regions there are.
  Result<uint64_t> RegionSize(const std::string& region) const;

  /// \brief Copies bytes [offset, offset+size) of `region` into `dst`, verifying every chunk
  /// the range touches (a chunk is read whole even if only part of it is wanted).
  /// \return NotFound (no such region); InvalidArgument (range outside the region); Corrupted
  /// "<path>: region '<name>' chunk <i> (bytes [a, b) of the region): checksum mismatch" (or
  /// the file got shorter); IoError on a read error. `dst` is unspecified after an error.
  Status Read(const std::string& region, uint64_t offset, void* dst, uint64_t size) const;
  /// \brief The whole region; `size` must equal its size (InvalidArgument otherwise).
  Status ReadRegion(const std::string& region, void* dst, uint64_t size) const;
  /// \brief Reads every chunk of every region and reports the bad ones (nothing is copied).
  Result<store::VerifyReport> Verify() const;

 private:
  std::unique_ptr<store::SegmentImageReader> reader_;
  std::shared_ptr<TokenBucket> bucket_;
};

}  // namespace reft::persist
