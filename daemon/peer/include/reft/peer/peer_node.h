#pragma once
/// \file peer_node.h
/// \brief The node-to-node layer of reftd in one object: PeerClient pool, the node directory
/// (who is alive, where), the job coordinator (commit, generations, slot locations, restore
/// decisions) and the Peer service. The control plane comes from a ControlPlaneFactory of
/// daemon/coord: etcd (coord::EtcdControlPlane), or gossip between the daemons
/// (coord::GossipControlPlane: SWIM membership and completion-set exchange). This component
/// carries the calls; the control plane answers them. The daemon creates the node, registers
/// it on its grpc::ServerBuilder, starts the server, then calls Start().
/// Thread-safe after Start(); Stop() before destroying the server's services.

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include <grpcpp/grpcpp.h>

#include "reft/coord/job_coordinator.h"
#include "reft/peer/bulk_listener.h"
#include "reft/peer/gossip_endpoints.h"
#include "reft/local/job_ownership.h"
#include "reft/mutex.h"
#include "reft/peer/job_access.h"
#include "reft/coord/job_coordinator.h"
#include "reft/peer/job_records.h"
#include "reft/peer/node_directory.h"
#include "reft/peer/peer_client.h"
#include "reft/peer/peer_options.h"
#include "reft/peer/peer_service.h"
#include "reft/security/authorizer.h"

namespace reft::peer {

/// \brief How a node authenticates to its peers and checks them (docs/security.md).
struct PeerSecurity {
  std::shared_ptr<grpc::ChannelCredentials> credentials;  ///< outgoing calls; null = plain text
  std::string token;                                      ///< sent on every outgoing call
  const security::Authorizer* authorizer = nullptr;  ///< checks every incoming call; null = none
};

/// \brief Where agreement and liveness come from.
struct ControlPlane {
  std::unique_ptr<NodeDirectory> nodes;
  std::unique_ptr<coord::JobCoordinator> jobs;
  /// Who owns each job, cluster-wide (null: the node keeps its own record; gossip).
  std::unique_ptr<local::JobOwnership> owners;
  /// Which nodes may fetch a job's bytes (null: every authenticated member; gossip).
  std::unique_ptr<JobAccess> access;
  /// The job records operators list and the sweeper that forgets gone jobs (null: gossip).
  std::unique_ptr<JobRecords> records;
  /// The gossip control plane's answers to the Peer calls it talks over (pointing into `nodes`
  /// and `jobs`; null with etcd).
  GossipEndpoints gossip;
};
/// Builds a control plane for a node (its options, store and peer client outlive it).
using ControlPlaneFactory = std::function<Result<ControlPlane>(
    const PeerOptions& options, store::SnapshotStore* store, PeerClient* client)>;

class PeerNode {
 public:
  /// `store` (and `security.authorizer`) must outlive the node. Fails InvalidArgument naming a
  /// bad option, or whatever `control_plane` fails with.
  static Result<std::unique_ptr<PeerNode>> Create(PeerOptions options,
                                                  store::SnapshotStore* store,
                                                  PeerSecurity security,
                                                  const ControlPlaneFactory& control_plane);
  ~PeerNode();

  /// Registers the Peer service on `builder`. The server's max send size must be at least
  /// options.max_message_bytes (PeerService::ConfigureServerBuilder sets both limits, for a
  /// server of its own; a shared server sets its own limits >= that).
  void Register(grpc::ServerBuilder* builder);
  /// Starts the node directory (registration, seeds) and the coordinator.
  /// `advertise_address` overrides the option when the listening port was only known after the
  /// server started ("" = keep).
  Status Start(const std::string& advertise_address = "");
  void Stop();

  NodeDirectory& membership() { return *nodes_; }
  PeerClient& client() { return *client_; }
  /// The job coordinator to hand to the local channel (owned by this node).
  coord::JobCoordinator* coordinator() { return jobs_.get(); }
  /// The control plane's record of job owners, or null (gossip: the daemon keeps its own).
  local::JobOwnership* owners() { return owners_.get(); }
  /// The control plane's check of which nodes may fetch a job's bytes, or null (gossip).
  JobAccess* access() { return access_.get(); }
  /// The control plane's job records (`reftctl jobs`), or null (gossip).
  JobRecords* records() { return records_.get(); }
  PeerService* service() { return service_.get(); }
  /// The bulk transport's listener (PeerOptions::bulk_listen), or null.
  const BulkListener* bulk() const { return bulk_.get(); }
  /// A non-owning CommitCoordinator that forwards to coordinator(), for wrappers that take
  /// ownership of their inner coordinator (reftd's MeteredCommitCoordinator). Must not outlive
  /// this PeerNode.
  std::unique_ptr<local::CommitCoordinator> CoordinatorHandle();

  /// Serves Peer.StageLayers on this node (see PeerService::SetStageHandler).
  void SetStageHandler(PeerService::StageHandler handler) {
    service_->SetStageHandler(std::move(handler));
  }
  /// Serves Peer.PersistStep on this node (see PeerService::SetPersistHandler).
  void SetPersistHandler(PeerService::PersistHandler handler) {
    service_->SetPersistHandler(std::move(handler));
  }

  /// Restore path helpers: address of a live member, or NotFound/Unavailable. From the first
  /// call on, this node follows departures: a node declared dead has the fetches in flight to
  /// the address resolved here cancelled (PeerClient::Forget), so a fetch from a stopped
  /// process ends at its death, not at its deadline.
  Result<std::string> AddressOf(const std::string& node_id) const;
  /// FetchRegion from node `node_id` (see PeerClient::FetchRegion).
  Status FetchRegion(const std::string& node_id, const store::RankKey& rank, int64_t step,
                     const std::string& region, uint8_t* dst, uint64_t dst_size,
                     uint64_t offset = 0);

 private:
  PeerNode() = default;
  /// A departed node's fetches cancelled (see AddressOf); on a directory thread.
  void OnDeparture(const std::string& node_id) const;

  PeerOptions options_;
  std::unique_ptr<PeerClient> client_;
  // Before nodes_: the departure listener uses them until the directory is gone.
  mutable Mutex addresses_mu_;
  mutable std::map<std::string, std::string> addresses_ REFT_GUARDED_BY(addresses_mu_);
  mutable std::once_flag follow_departures_;
  std::unique_ptr<NodeDirectory> nodes_;
  std::unique_ptr<coord::JobCoordinator> jobs_;
  std::unique_ptr<local::JobOwnership> owners_;
  std::unique_ptr<JobAccess> access_;  ///< before service_: outlives it
  std::unique_ptr<JobRecords> records_;
  std::unique_ptr<BulkListener> bulk_;  ///< before service_: outlives it
  std::unique_ptr<PeerService> service_;
};

}  // namespace reft::peer
