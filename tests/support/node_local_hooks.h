#pragma once
/// \file node_local_hooks.h
/// \brief Test doubles of the cluster hooks for a LocalServer without the cluster layer: a
/// PeerCopier and a RestoreProvider that see only this node's store (every rank of the job on
/// this node). reftd always uses daemon/recovery's implementations, which also reach peers,
/// replicas and parity; the local channel's tests (and the client bench) use these.

#include "reft/local/commit_coordinator.h"
#include "reft/local/recovery_hooks.h"
#include "reft/store/snapshot_store.h"

namespace reft::testing {

/// \brief Copies a published region of another rank's slot in this node's store, polling until
/// it is published or the timeout passes.
class NodeLocalPeerCopier final : public local::PeerCopier {
 public:
  explicit NodeLocalPeerCopier(store::SnapshotStore* store) : store_(store) {}
  Status CopyPublished(const store::RankKey& from, int64_t step, const std::string& region,
                       uint8_t* dst, uint64_t size, std::chrono::milliseconds timeout,
                       const std::function<Status()>& abandon) override;

 private:
  store::SnapshotStore* store_;
};

/// \brief REFT-load from this node's slots only: the newest committed step, every SG member's
/// shard read and checksum-verified from the local store; Lost naming the first missing member
/// (rebuilding it needs peers, replicas or parity: the cluster layer's job).
class NodeLocalRestoreProvider final : public local::RestoreProvider {
 public:
  NodeLocalRestoreProvider(store::SnapshotStore* store, local::CommitCoordinator* coordinator)
      : store_(store), coordinator_(coordinator) {}
  /// Same-layout restores only (`request.reshape` needs the cluster layer's catalog).
  Result<local::RestoredState> Restore(const protect::SlotMeta& meta,
                                       const local::RestoreRequest& request) override;

 private:
  store::SnapshotStore* store_;
  local::CommitCoordinator* coordinator_;
};


}  // namespace reft::testing
