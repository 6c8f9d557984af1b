#include "reft/coord/gossip_control_plane.h"

#include "gossip_job_coordinator.h"
#include "swim_membership.h"

namespace reft::coord {

peer::ControlPlaneFactory MakeGossipControlPlane() {
  return [](const peer::PeerOptions& options, store::SnapshotStore* store,
            peer::PeerClient* client) -> Result<peer::ControlPlane> {
    auto swim = std::make_unique<SwimMembership>(options, client);
    auto commit = std::make_unique<GossipJobCoordinator>(store, swim.get(), client,
                                                         options.anti_entropy_interval);
    peer::ControlPlane cp;
    cp.gossip = {swim.get(), commit.get()};
    cp.nodes = std::move(swim);
    cp.jobs = std::move(commit);
    return cp;
  };
}

}  // namespace reft::coord
