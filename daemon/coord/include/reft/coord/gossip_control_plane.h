#pragma once
/// \file gossip_control_plane.h
/// \brief The gossip control plane of a PeerNode: SWIM membership (SwimMembership) and the
/// completion-set exchange (GossipJobCoordinator), talking between the daemons over the Peer
/// service. A development fallback for a few nodes without etcd: no consensus, so the
/// guarantees it lacks (one restore decision, fencing of a partitioned side, owners and access
/// across the cluster) are listed in docs/coordination.md; reftd warns at start.

#include "reft/peer/peer_node.h"

namespace reft::coord {

/// \brief A factory for peer::PeerNode::Create. Nothing is sent before PeerNode::Start.
peer::ControlPlaneFactory MakeGossipControlPlane();

}  // namespace reft::coord
