#pragma once
/// \file etcd_control_plane.h
/// \brief The etcd control plane of a PeerNode: one etcd client shared by the node directory
/// (registration under a lease) and the job coordinator (commit, generation, locations,
/// restore decisions). docs/coordination.md describes both.

#include <chrono>
#include <memory>

#include "reft/coord/etcd_client.h"
#include "reft/coord/etcd_job_coordinator.h"
#include "reft/coord/etcd_job_records.h"
#include "reft/coord/lease_sizing.h"
#include "reft/peer/peer_node.h"

namespace reft::coord {

struct EtcdControlPlaneOptions {
  EtcdOptions etcd;
  /// A node is declared dead this long after its last lease renewal (`lease.floor`), or
  /// longer in a cluster large enough that its renewals would exceed `lease.renewals_per_s`
  /// (lease_sizing.h).
  LeaseSizing lease;
  EtcdCoordinatorOptions coordinator;
  JobRecordsOptions records;
  /// Deaths held while the control plane is suspect (docs/coordination.md): more lapses than
  /// this share of the registered nodes within one lease TTL is a mass expiry
  /// (`etcd.mass_expiry_fraction`).
  double mass_expiry_fraction = 0.05;
  /// false: every lapse is a death at once (as before the holds; for comparisons).
  bool hold_deaths_while_suspect = true;
};

/// \brief A factory for peer::PeerNode::Create. The client is created at once (InvalidArgument
/// for bad endpoints); nothing is sent to etcd before PeerNode::Start.
Result<peer::ControlPlaneFactory> MakeEtcdControlPlane(EtcdControlPlaneOptions options);
/// \brief The same over an existing client (`options.etcd` unused): every node the factory
/// builds shares it (the scale bench hosts many nodes per process this way).
peer::ControlPlaneFactory MakeEtcdControlPlane(std::shared_ptr<EtcdClient> etcd,
                                               EtcdControlPlaneOptions options);

}  // namespace reft::coord
