#pragma once
/// \file cluster_view.h
/// \brief Where the snapshots of one job are: every complete or committed slot (node, rank,
/// step, state, regions with sizes and sealed chunk checksums) in this node's store and in the
/// manifests of the job's nodes (the control plane's record of where the job's slots and
/// trainers are), and which node hosts which connected trainer ("joined" ranks).
///
/// A view is a snapshot of the cluster at one moment: a slot listed may be gone when it is
/// read (its node died, a newer commit freed it); readers treat that as a failed source and move
/// on. Nodes that did not answer are listed in `unreachable` and hold nothing in the view; those
/// of them the control plane still reports alive are also in `waiting`: what they hold is not
/// known yet, so nothing they may hold can be declared lost (CollectSettled waits for them).

#include <chrono>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "reft/coord/roles.h"
#include "reft/result.h"
#include "reft/store/snapshot_store.h"

namespace reft::peer {
class PeerNode;
}  // namespace reft::peer

namespace reft::recovery {

/// \brief One region of a located slot, with the checksums its holder sealed.
struct RegionEntry {
  std::string name;
  uint64_t size = 0;
  uint64_t chunk_size = 0;       ///< sealed checksum granularity of the holder's store
  std::vector<uint64_t> chunks;  ///< XXH3-64 of every chunk of the region
};

/// \brief One complete or committed slot somewhere in the cluster.
struct SlotEntry {
  std::string node;     ///< node id of the holder
  std::string address;  ///< its Peer address; empty for this node
  bool local = false;   ///< held by this node's store
  store::RankKey rank;
  int64_t step = -1;
  std::string state;  ///< "complete" | "committed"
  std::vector<RegionEntry> regions;

  /// The region named `name`, or nullptr.
  const RegionEntry* Region(const std::string& name) const;
  /// "this node (n0)" or "node 'n1'", for messages.
  std::string Where() const;
};

struct ClusterView {
  std::string job;
  std::string self;  ///< this node's id
  std::vector<SlotEntry> slots;
  /// Ranks whose trainer is connected now, and the nodes they are connected to.
  std::map<store::RankKey, std::set<std::string>> joined;
  /// Node id -> Peer address of every member that answered (this node: "").
  std::map<std::string, std::string> addresses;
  /// "node: reason" for live members whose manifest could not be read.
  std::vector<std::string> unreachable;
  /// Nodes of the job that are alive (registered, not declared dead) but did not answer.
  std::vector<std::string> waiting;
  /// Nodes recorded for the job that the control plane reports dead (their memory is gone).
  std::vector<std::string> dead;

  /// Slots of `rank` holding `step`, this node's first.
  std::vector<const SlotEntry*> Find(const store::RankKey& rank, int64_t step) const;
  /// Every rank with a slot at `step`.
  std::set<store::RankKey> RanksAt(int64_t step) const;
};

/// \brief How long a view waited for silent nodes, and why (for the restore report).
struct Settling {
  std::chrono::nanoseconds waited{0};
  std::string reason;  ///< "" when nothing was waited for
};

/// \brief Builds ClusterViews from the local store and the manifests of the job's nodes.
/// Thread-safe (no state of its own).
class Locator {
 public:
  /// `peer` is the transport (membership, manifests); `slots` says which nodes the job has and
  /// which of its trainers are connected here. All must outlive the locator.
  Locator(store::SnapshotStore* store, peer::PeerNode* peer, coord::SlotDirectory* slots);

  /// \brief Lists `job` on this node and asks every live member for its manifest in parallel,
  /// each call bounded by `timeout`. Never fails because of a member: unreachable ones are
  /// listed in the view. IoError/Corrupted only when this node's own chunk tables are unreadable.
  Result<ClusterView> Collect(const std::string& job, std::chrono::milliseconds timeout) const;

  /// \brief Wait for knowledge: Collect again (with a growing pause) while some node of the
  /// job is alive but silent, until every node answered or is known dead, or `deadline`.
  /// Progress goes to the log and to `progress` (one line per round). The view returned may
  /// still list `waiting` nodes when the deadline passed: the caller must not call their bytes
  /// lost (Unavailable, not Lost).
  Result<ClusterView> CollectSettled(const std::string& job, std::chrono::milliseconds timeout,
                                     std::chrono::steady_clock::time_point deadline,
                                     Settling* settling,
                                     const std::function<void(const std::string&)>& progress =
                                         nullptr) const;

 private:
  store::SnapshotStore* store_;
  peer::PeerNode* peer_;
  coord::SlotDirectory* slots_;
};

}  // namespace reft::recovery
