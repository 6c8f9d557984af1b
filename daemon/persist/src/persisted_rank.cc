#include "reft/persist/persisted_rank.h"

namespace reft::persist {

PersistedRank::PersistedRank(std::unique_ptr<store::SegmentImageReader> reader,
                             std::shared_ptr<TokenBucket> bucket)
    : reader_(std::move(reader)), bucket_(std::move(bucket)) {}

const store::RankKey& PersistedRank::rank() const { return reader_->rank(); }
int64_t PersistedRank::step() const { return reader_->step(); }
const std::string& PersistedRank::path() const { return reader_->name(); }
const std::vector<store::RegionSpec>& PersistedRank::regions() const {
  return reader_->regions();
}
uint64_t PersistedRank::file_bytes() const { return reader_->file_bytes(); }
uint64_t PersistedRank::chunk_table_checksum() const { return reader_->chunk_table_checksum(); }

Result<uint64_t> PersistedRank::RegionSize(const std::string& region) const {
  REFT_ASSIGN_OR_RETURN(size_t i, reader_->FindRegion(region));
  return reader_->regions()[i].size;
}

Status PersistedRank::Read(const std::string& region, uint64_t offset, void* dst,
                           uint64_t size) const {
  REFT_ASSIGN_OR_RETURN(size_t i, reader_->FindRegion(region));
  return reader_->Read(i, offset, dst, size, bucket_.get());
}

Status PersistedRank::ReadRegion(const std::string& region, void* dst, uint64_t size) const {
  REFT_ASSIGN_OR_RETURN(size_t i, reader_->FindRegion(region));
  const uint64_t have = reader_->regions()[i].size;
  if (size != have) {
    return Status::InvalidArgument(path() + ": region '" + region + "' has " +
                                   std::to_string(have) + " bytes, the buffer " +
                                   std::to_string(size));
  }
  return reader_->Read(i, 0, dst, size, bucket_.get());
}

Result<store::VerifyReport> PersistedRank::Verify() const { return reader_->Verify(bucket_.get()); }

}  // namespace reft::persist
