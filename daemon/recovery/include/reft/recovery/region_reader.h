#pragma once
/// \file region_reader.h
/// \brief Reads a byte range of one region of a located slot, from this node's store or over
/// the Peer service, and verifies it against the slot's sealed chunk checksums.
///
/// What is verified where:
/// - local slot: every sealed chunk the range touches is hashed whole and compared with the
///   chunk table in the segment (VerifySealedRange) before the bytes are copied out;
/// - peer slot: the peer layer verifies every wire chunk (sealed checksum end to end, or the
///   server re-checks the sealed chunk before serving part of it) and, in the same hash pass,
///   every sealed chunk lying wholly inside the range against the checksums the holder listed
///   in its manifest (FetchOptions::expect_chunks), so a slot replaced between manifest and
///   fetch is caught too. Each byte is hashed once on this node.
/// Any mismatch is Corrupted naming the region, chunk and holder; nothing unverified is returned.

#include <chrono>
#include <cstdint>
#include <string>

#include "reft/recovery/cluster_view.h"
#include "reft/result.h"

namespace reft::recovery {

class RegionReader {
 public:
  /// Both must outlive the reader.
  RegionReader(store::SnapshotStore* store, peer::PeerNode* peer);

  /// \brief Bytes [offset, offset+size) of `region` of `slot` into `dst`, done by `deadline`.
  /// Corrupted (checksum), NotFound (slot or region gone), Unavailable (holder declared dead or
  /// unreachable), Timeout (deadline passed, e.g. a hung holder), Protocol (stale/fenced).
  Status Read(const SlotEntry& slot, const std::string& region, uint64_t offset, uint8_t* dst,
              uint64_t size, std::chrono::steady_clock::time_point deadline) const;

 private:
  Status ReadLocal(const SlotEntry& slot, const std::string& region, uint64_t offset, uint8_t* dst,
                   uint64_t size) const;
  Status ReadRemote(const SlotEntry& slot, const std::string& region, uint64_t offset, uint8_t* dst,
                    uint64_t size, std::chrono::steady_clock::time_point deadline) const;

  store::SnapshotStore* store_;
  peer::PeerNode* peer_;
};

}  // namespace reft::recovery
