// A store served by a real PeerNode on 127.0.0.1 and a bare PeerClient that fetches from it:
// the FetchRegion side of the benches that compare FetchRegion with another way to move the bytes.
#pragma once

#include <memory>
#include <string>

#include <grpcpp/grpcpp.h>

#include "reft/peer/peer_client.h"
#include "reft/peer/peer_node.h"
#include "reft/store/snapshot_store.h"

namespace reft::bench {

class LoopbackPeer {
 public:
  /// Serves `store` on an ephemeral loopback port; exits the bench (bench::Die) on failure.
  /// `bulk`: FetchRegion's bytes go over the bulk transport (reftd's default on a plain-text
  /// Peer channel), else over gRPC streams.
  explicit LoopbackPeer(store::SnapshotStore* store, bool bulk = true);
  ~LoopbackPeer() { Stop(); }
  /// Stops the node, then the server (idempotent); before the bench removes the served job.
  void Stop();

  /// The fetching side: a PeerClient with no Peer server of its own.
  peer::PeerClient& client() { return *client_; }
  /// Where the source serves (`FetchRegion`'s address).
  const std::string& address() const { return address_; }

 private:
  std::unique_ptr<peer::PeerNode> node_;
  std::unique_ptr<grpc::Server> server_;
  std::string address_;
  std::unique_ptr<peer::PeerClient> client_;
};

}  // namespace reft::bench
