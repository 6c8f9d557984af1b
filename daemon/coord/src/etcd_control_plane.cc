#include "reft/coord/etcd_control_plane.h"

#include "control_plane_suspicion.h"
#include "etcd_job_access.h"
#include "reft/coord/etcd_job_owners.h"
#include "reft/coord/etcd_node_directory.h"
#include "reft/peer/peer_client.h"

namespace reft::coord {

Result<peer::ControlPlaneFactory> MakeEtcdControlPlane(EtcdControlPlaneOptions options) {
  REFT_ASSIGN_OR_RETURN(std::unique_ptr<EtcdClient> client, EtcdClient::Create(options.etcd));
  return MakeEtcdControlPlane(std::shared_ptr<EtcdClient>(std::move(client)), std::move(options));
}

namespace {
// A probe of a held node: any answer from its reftd — an error included (the Peer service
// answers Ping with UNIMPLEMENTED when there is no gossip) — says its process lives; no answer
// within the timeout or a refused connection does not.
constexpr auto kProbeTimeout = std::chrono::milliseconds(1000);

bool Answered(peer::PeerClient* peers, const std::string& address) {
  auto r = peers->Ping(address, v1::PingRequest(), kProbeTimeout);
  if (r.ok()) return true;
  const StatusCode code = r.status().code();
  return code != StatusCode::kUnavailable && code != StatusCode::kTimeout;
}

// One judge of etcd's health per factory (per reftd), fed by every answer of its client.
std::shared_ptr<ControlPlaneSuspicion> WatchEtcdHealth(EtcdClient* etcd, double fraction) {
  auto suspicion = std::make_shared<ControlPlaneSuspicion>(SuspicionOptions{fraction});
  etcd->AddAnswerObserver([suspicion](const EtcdAnswer& a) {
    const auto now = std::chrono::steady_clock::now();
    suspicion->Answer(now, a.latency, a.answered);
    suspicion->LeaderTerm(now, a.raft_term);
  });
  return suspicion;
}
}  // namespace

peer::ControlPlaneFactory MakeEtcdControlPlane(std::shared_ptr<EtcdClient> etcd,
                                               EtcdControlPlaneOptions options) {
  std::shared_ptr<ControlPlaneSuspicion> suspicion;
  if (options.hold_deaths_while_suspect) {
    suspicion = WatchEtcdHealth(etcd.get(), options.mass_expiry_fraction);
  }
  return peer::ControlPlaneFactory(
      [etcd, options, suspicion](const peer::PeerOptions& po, store::SnapshotStore* store,
                                 peer::PeerClient* peers) -> Result<peer::ControlPlane> {
        auto nodes = std::make_unique<EtcdNodeDirectory>(po, etcd, options.lease);
        if (suspicion && peers != nullptr) {
          nodes->HoldDeathsWhileSuspect(
              suspicion, [peers](const std::string& address) { return Answered(peers, address); });
        }
        auto jobs = std::make_unique<EtcdJobCoordinator>(store, etcd, nodes.get(),
                                                         options.coordinator, peers);
        peer::ControlPlane cp;
        EtcdJobCoordinator* coordinator = jobs.get();
        cp.owners = std::make_unique<EtcdJobOwners>(
            etcd, [coordinator](const std::string& job) { return coordinator->KnownOwner(job); });
        cp.access = std::make_unique<EtcdJobAccess>(etcd, nodes.get());
        cp.records = std::make_unique<EtcdJobRecords>(etcd, nodes.get(), options.records);
        cp.nodes = std::move(nodes);
        cp.jobs = std::move(jobs);
        return cp;
      });
}

}  // namespace reft::coord
