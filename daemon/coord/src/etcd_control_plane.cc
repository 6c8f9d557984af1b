#include "reft/coord/etcd_control_plane.h"

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
        cp.nodes = std::move(nodes);
        cp.jobs = std::move(jobs);
        return cp;
      });
}

}  // namespace reft::coord
