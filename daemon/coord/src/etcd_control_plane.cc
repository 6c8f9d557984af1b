#include "reft/coord/etcd_control_plane.h"

#include "etcd_job_access.h"
#include "reft/coord/etcd_job_owners.h"
#include "reft/coord/etcd_node_directory.h"

namespace reft::coord {

Result<peer::ControlPlaneFactory> MakeEtcdControlPlane(EtcdControlPlaneOptions options) {
  REFT_ASSIGN_OR_RETURN(std::unique_ptr<EtcdClient> client, EtcdClient::Create(options.etcd));
  return MakeEtcdControlPlane(std::shared_ptr<EtcdClient>(std::move(client)), std::move(options));
}

peer::ControlPlaneFactory MakeEtcdControlPlane(std::shared_ptr<EtcdClient> etcd,
                                               EtcdControlPlaneOptions options) {
  return peer::ControlPlaneFactory(
      [etcd, options](const peer::PeerOptions& po, store::SnapshotStore* store,
                      peer::PeerClient* peers) -> Result<peer::ControlPlane> {
        auto nodes = std::make_unique<EtcdNodeDirectory>(po, etcd, options.lease);
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
