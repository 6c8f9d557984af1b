#pragma once
// In-process reftd peer layer for tests: a store in a TempDir, a PeerNode and a gRPC server on
// 127.0.0.1:0. Fast timers so failure detection takes well under a second or two.

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "reft/peer/peer_node.h"
#include "reft/store/snapshot_store.h"
#include "test_support.h"

namespace reft::peer::test {

/// Fast timers, and FetchRegion over the bulk transport (a listener on 127.0.0.1:0), as reftd
/// runs on a plain-text Peer channel.
PeerOptions FastOptions(const std::string& node_id, std::vector<std::string> seeds);

/// A store in `shm_dir` without prefaulting; throws when it cannot be opened.
std::unique_ptr<store::SnapshotStore> OpenTestStore(const std::string& shm_dir,
                                                    uint64_t chunk_size = 64 << 10);

/// Serves `node`'s Peer service on 127.0.0.1:0 with `credentials` (message limits of
/// `options`) and starts the node at the bound address, which goes to `*address`. Throws on
/// failure.
std::unique_ptr<grpc::Server> ServeOnLoopback(PeerNode* node, const PeerOptions& options,
                                              std::shared_ptr<grpc::ServerCredentials> credentials,
                                              std::string* address);

struct TestNode {
  /// Opens the store in `dir` (created by the caller, so a restart can reuse it).
  /// `tweak` (optional) adjusts the node's PeerOptions after FastOptions().
  /// `control_plane` (optional): etcd instead of gossip (see reft/coord/etcd_control_plane.h).
  TestNode(const std::string& node_id, const std::string& shm_dir, std::vector<std::string> seeds,
           uint64_t epoch = 0, uint64_t chunk_size = 64 << 10, uint64_t bandwidth = 0,
           const std::function<void(PeerOptions*)>& tweak = nullptr,
           const ControlPlaneFactory& control_plane = nullptr);
  ~TestNode();
  /// Stops the server at once (a link drop as seen by the peers) and the node's threads.
  void Kill();

  std::string node_id;
  std::string address;
  std::unique_ptr<store::SnapshotStore> store;
  std::unique_ptr<PeerNode> peer;
  std::unique_ptr<grpc::Server> server;
};

/// Writes `bytes` as region "params" of `rank`'s slot for `step` and seals it.
void WriteSlot(store::SnapshotStore* store, const store::RankKey& rank, int64_t step,
               const std::vector<uint8_t>& bytes);

/// Polls `pred` every 10 ms until true or `timeout`; returns whether it became true.
template <typename Pred>
bool Eventually(Pred pred, std::chrono::milliseconds timeout) {
  auto end = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < end) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return pred();
}

/// State of `node_id` as `observer` sees it (kDead when unknown).
MemberState StateOf(TestNode& observer, const std::string& node_id);

}  // namespace reft::peer::test
