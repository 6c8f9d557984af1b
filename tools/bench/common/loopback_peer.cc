#include "loopback_peer.h"

#include <chrono>

#include "bench_util.h"
#include "reft/coord/gossip_control_plane.h"
#include "reft/peer/peer_service.h"

namespace reft::bench {

LoopbackPeer::LoopbackPeer(store::SnapshotStore* store, bool bulk) {
  peer::PeerOptions source;
  source.node_id = "src";
  // The fetching side is a bare PeerClient with no Peer server: keep the source from declaring
  // it dead (and fencing it) during the run.
  source.suspicion_timeout = std::chrono::hours(1);
  if (bulk) source.bulk_listen = "127.0.0.1:0";
  auto node = peer::PeerNode::Create(source, store, {}, coord::MakeGossipControlPlane());
  if (!node.ok()) Die("peer node", node.status());
  node_ = std::move(*node);
  grpc::ServerBuilder b;
  int port = 0;
  b.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  node_->Register(&b);
  peer::PeerService::ConfigureServerBuilder(source, &b);
  server_ = b.BuildAndStart();
  address_ = "127.0.0.1:" + std::to_string(port);
  if (Status s = node_->Start(address_); !s.ok()) Die("start", s);

  peer::PeerOptions fetcher;
  fetcher.node_id = "dst";
  fetcher.advertise_address = "127.0.0.1:1";  // never listened on: the bench only fetches
  fetcher.fetch_deadline = std::chrono::milliseconds(600000);
  fetcher.bulk_fetch = bulk;
  const std::string advertised = fetcher.advertise_address;
  client_ = std::make_unique<peer::PeerClient>(fetcher, [advertised] {
    v1::Caller c;
    c.set_protocol_version(peer::kProtocolVersion);
    c.set_node_id("dst");
    c.set_epoch(1);
    c.set_address(advertised);
    return c;
  });
}

void LoopbackPeer::Stop() {
  if (server_ == nullptr) return;
  node_->Stop();
  server_->Shutdown(std::chrono::system_clock::now());
  server_.reset();
}

}  // namespace reft::bench
