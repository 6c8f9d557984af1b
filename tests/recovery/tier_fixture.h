#pragma once
// The persistent tier side of the recovery tests: per node, a TierAccess on one directory
// shared by all nodes (like an NFS mount), a Persister and a ReftLoad with the fallback on.
// Destroy a TierNode before its TestNode (it holds the node's store and PeerNode).

#include <memory>
#include <string>

#include "recovery_fixture.h"
#include "reft/persister/persister.h"
#include "reft/recovery/reft_load.h"
#include "reft/recovery/tier_access.h"

namespace reft::recovery::test {

inline persist::PersistOptions TierOptions(const std::string& node_id, const std::string& dir) {
  persist::PersistOptions o;
  o.dir = dir;
  o.node_id = node_id;
  o.keep = 0;  // keep every step: the tests look at all of them
  o.chunk_size = 64 << 10;
  return o;
}

struct TierNode {
  /// `every_steps` 0 = on demand only; `poll` = how often the schedule thread looks (the
  /// tests drive RunScheduleOnce themselves unless they want the thread).
  TierNode(TestNode& n, const std::string& dir, int64_t every_steps = 0,
           std::chrono::milliseconds poll = std::chrono::hours(1))
      : node(n),
        tier(TierOptions(n.node_id, dir)),
        load(n.store.get(), n.peer.get(), RecoveryAgreement::Of(n.peer->coordinator()),
             TestOptions()) {
    load.SetPersistentTier(&tier);
    reft::persister::PersisterOptions po;
    po.node_id = n.node_id;
    po.every_steps = every_steps;
    po.poll_interval = poll;
    po.peer_timeout = std::chrono::seconds(30);
    po.sync_timeout = std::chrono::seconds(1);
    po.next_commit_wait = std::chrono::seconds(3);  // the tests commit well within it
    persister = std::make_unique<reft::persister::Persister>(
        n.store.get(), n.peer.get(), reft::persister::PersisterAgreement::Of(n.peer->coordinator()),
        &tier, po);
    persister->Start();
  }
  ~TierNode() { persister.reset(); }

  TestNode& node;
  TierAccess tier;
  ReftLoad load;
  std::unique_ptr<reft::persister::Persister> persister;
};

}  // namespace reft::recovery::test
