#pragma once
/// \file published_copier.h
/// \brief local::PeerCopier for reftd: copies a ring neighbour's published region ("unique/<n>"
/// of rank dp+1, docs/architecture.md "Glossary": peer copy) into this rank's slot before it is sealed.
///
/// Locating rank `from`: this node first (its trainer is connected here, or its slot of the
/// step is here), then the node that served it last time (cached), then the members' manifests
/// (`joined`, then slots). Copy: local GetPublished + checksum check against the chunk table
/// Publish filled, or FetchRegion(published_only, expect_region_size) from the peer, whose
/// chunks are verified by the peer layer. While the region is not published yet (NotFound) it
/// polls with a doubling backoff (copy_backoff_min..max), re-reading the manifests every
/// relocate_interval; a dead or hung holder is located again. Gives up at `timeout`.
/// Counts the bytes it copied, from this node and from peers (copied(): the network a save
/// costs, reftd's reft_peer_copy_bytes_total). Thread-safe.

#include <atomic>
#include <map>
#include <string>

#include "reft/coord/roles.h"
#include "reft/local/recovery_hooks.h"
#include "reft/mutex.h"
#include "reft/recovery/cluster_view.h"
#include "reft/recovery/recovery_options.h"

namespace reft::recovery {

class PublishedCopier final : public local::PeerCopier {
 public:
  /// `peer` is the transport; `slots` says where the neighbour's trainer is connected and
  /// which nodes the job has. All must outlive this object.
  PublishedCopier(store::SnapshotStore* store, peer::PeerNode* peer, coord::SlotDirectory* slots,
                  RecoveryOptions options = {});

  /// \brief See local::PeerCopier. Timeout (with the last reason) when the region is not
  /// published within `timeout`; InvalidArgument when its size differs from `size`; Corrupted
  /// is retried (the owner may re-publish) and reported at the timeout.
  Status CopyPublished(const store::RankKey& from, int64_t step, const std::string& region,
                       uint8_t* dst, uint64_t size, std::chrono::milliseconds timeout,
                       const std::function<Status()>& abandon = {}) override;

  /// Bytes of the copies done so far: read on this node (`local`) and pulled from other
  /// nodes over the peer transport (`remote`). Only completed copies count.
  struct CopiedBytes {
    uint64_t local = 0;
    uint64_t remote = 0;
  };
  CopiedBytes copied() const;

 private:
  Status CopyLocal(const store::RankKey& from, int64_t step, const std::string& region,
                   uint8_t* dst, uint64_t size);
  /// Node ids that may host `from`, best first ("" = this node).
  std::vector<std::string> Locate(const store::RankKey& from, int64_t step,
                                  std::chrono::milliseconds timeout);

  store::SnapshotStore* store_;
  peer::PeerNode* peer_;
  coord::SlotDirectory* slots_;
  RecoveryOptions options_;
  Locator locator_;
  Mutex mu_;
  std::map<store::RankKey, std::string> cache_ REFT_GUARDED_BY(mu_);  // node that served it last
  std::atomic<uint64_t> copied_local_{0};
  std::atomic<uint64_t> copied_remote_{0};
};

}  // namespace reft::recovery
