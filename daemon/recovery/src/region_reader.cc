/// \file region_reader.cc
/// \brief Verified reads of located regions: local store or Peer FetchRegion.

#include "reft/recovery/region_reader.h"

#include <algorithm>
#include <cstring>

#include "reft/peer/peer_node.h"
#include "reft/peer/sealed_checksums.h"

namespace reft::recovery {

RegionReader::RegionReader(store::SnapshotStore* store, peer::PeerNode* peer)
    : store_(store), peer_(peer) {}

Status RegionReader::Read(const SlotEntry& slot, const std::string& region, uint64_t offset,
                          uint8_t* dst, uint64_t size,
                          std::chrono::steady_clock::time_point deadline) const {
  const RegionEntry* entry = slot.Region(region);
  if (entry == nullptr) {
    return Status::NotFound("region '" + region + "' is not in the slot of " +
                            slot.rank.ToString() + " step " + std::to_string(slot.step) + " on " +
                            slot.Where());
  }
  if (offset > entry->size || size > entry->size - offset) {
    return Status::InvalidArgument("bytes " + std::to_string(offset) + "+" + std::to_string(size) +
                                   " exceed region '" + region + "' (" +
                                   std::to_string(entry->size) + " bytes) of " +
                                   slot.rank.ToString() + " on " + slot.Where());
  }
  if (size == 0) return Status::OK();
  if (std::chrono::steady_clock::now() >= deadline) {
    return Status::Timeout("deadline passed before reading '" + region + "' of " +
                           slot.rank.ToString() + " from " + slot.Where());
  }
  return slot.local ? ReadLocal(slot, region, offset, dst, size)
                    : ReadRemote(slot, region, offset, dst, size, deadline);
}

Status RegionReader::ReadLocal(const SlotEntry& slot, const std::string& region, uint64_t offset,
                               uint8_t* dst, uint64_t size) const {
  REFT_ASSIGN_OR_RETURN(std::shared_ptr<store::SlotRef> ref, store_->Get(slot.rank, slot.step));
  REFT_ASSIGN_OR_RETURN(size_t idx, ref->FindRegion(region));
  // One sealed chunk at a time, hashed and then copied while it is still in the cache.
  const uint64_t c = slot.Region(region)->chunk_size;
  const uint64_t end = offset + size;
  for (uint64_t pos = offset; pos < end;) {
    const uint64_t next = c > 0 ? std::min(end, (pos / c + 1) * c) : end;
    REFT_RETURN_NOT_OK(peer::VerifySealedRange(*ref, idx, pos, next - pos, slot.Where()));
    std::memcpy(dst + (pos - offset), ref->region_data(idx) + pos, next - pos);
    pos = next;
  }
  return Status::OK();
}

Status RegionReader::ReadRemote(const SlotEntry& slot, const std::string& region, uint64_t offset,
                                uint8_t* dst, uint64_t size,
                                std::chrono::steady_clock::time_point deadline) const {
  // A holder declared dead since the view was taken is not worth a connection attempt.
  REFT_ASSIGN_OR_RETURN(std::string address, peer_->AddressOf(slot.node));
  peer::FetchOptions fo;
  fo.timeout =
      std::max(std::chrono::milliseconds(1), std::chrono::duration_cast<std::chrono::milliseconds>(
                                                 deadline - std::chrono::steady_clock::now()));
  // Second, independent check against the holder's manifest, folded into the client's one hash
  // pass: every sealed chunk wholly inside the range must carry the manifest's checksum (the
  // edges of a partial chunk are checked by the server against the same table).
  const RegionEntry& e = *slot.Region(region);
  fo.expect_region_size = e.size;
  if (e.chunk_size > 0) {
    fo.expect_chunks = &e.chunks;
    fo.expect_chunk_size = e.chunk_size;
  }
  Status st =
      peer_->client().FetchRegion(address, slot.rank, slot.step, region, dst, size, offset, fo);
  return st.code() == StatusCode::kCorrupted ? st.WithContext(slot.Where()) : st;
}

}  // namespace reft::recovery
