#include "peer_fixture.h"

#include <cstring>
#include <stdexcept>

#include "reft/coord/gossip_control_plane.h"

namespace reft::peer::test {

PeerOptions FastOptions(const std::string& node_id, std::vector<std::string> seeds) {
  PeerOptions o;
  o.node_id = node_id;
  o.seeds = std::move(seeds);
  o.probe_interval = std::chrono::milliseconds(100);
  o.probe_timeout = std::chrono::milliseconds(100);
  o.suspicion_timeout = std::chrono::milliseconds(400);
  o.rpc_deadline = std::chrono::milliseconds(500);
  o.fetch_deadline = std::chrono::milliseconds(1500);
  o.anti_entropy_interval = std::chrono::milliseconds(200);
  // FetchRegion over the bulk transport, as reftd does on a plain-text Peer channel.
  o.bulk_listen = "127.0.0.1:0";
  o.bulk_fetch = true;
  return o;
}

std::unique_ptr<store::SnapshotStore> OpenTestStore(const std::string& shm_dir,
                                                    uint64_t chunk_size) {
  store::StoreOptions so;
  so.shm_dir = shm_dir;
  so.prefault = false;
  so.chunk_size = chunk_size;
  auto s = store::SnapshotStore::Open(so);
  if (!s.ok()) throw std::runtime_error(s.status().ToString());
  return std::move(*s);
}

std::unique_ptr<grpc::Server> ServeOnLoopback(PeerNode* node, const PeerOptions& options,
                                              std::shared_ptr<grpc::ServerCredentials> credentials,
                                              std::string* address) {
  grpc::ServerBuilder b;
  int port = 0;
  b.AddListeningPort("127.0.0.1:0", std::move(credentials), &port);
  node->Register(&b);
  PeerService::ConfigureServerBuilder(options, &b);
  auto server = b.BuildAndStart();
  if (!server || port == 0) throw std::runtime_error("cannot start the Peer server");
  *address = "127.0.0.1:" + std::to_string(port);
  Status st = node->Start(*address);
  if (!st.ok()) throw std::runtime_error(st.ToString());
  return server;
}

TestNode::TestNode(const std::string& id, const std::string& shm_dir,
                   std::vector<std::string> seeds, uint64_t epoch, uint64_t chunk_size,
                   uint64_t bandwidth, const std::function<void(PeerOptions*)>& tweak,
                   const ControlPlaneFactory& control_plane)
    : node_id(id) {
  store = OpenTestStore(shm_dir, chunk_size);
  PeerOptions o = FastOptions(id, std::move(seeds));
  o.epoch = epoch;
  o.peer_stream_bandwidth = bandwidth;
  if (tweak) tweak(&o);
  auto p = PeerNode::Create(o, store.get(), {},
                            control_plane ? control_plane : coord::MakeGossipControlPlane());
  if (!p.ok()) throw std::runtime_error(p.status().ToString());
  peer = std::move(*p);
  server = ServeOnLoopback(peer.get(), FastOptions(id, {}), grpc::InsecureServerCredentials(),
                           &address);
}

TestNode::~TestNode() { Kill(); }

void TestNode::Kill() {
  if (peer) peer->Stop();
  if (server) {
    server->Shutdown(std::chrono::system_clock::now());
    server.reset();
  }
}

void WriteSlot(store::SnapshotStore* st, const store::RankKey& rank, int64_t step,
               const std::vector<uint8_t>& bytes) {
  Status s = st->ConfigureRank(rank, {{"params", bytes.size()}});
  if (!s.ok()) throw std::runtime_error(s.ToString());
  auto w = st->BeginWrite(rank, step);
  if (!w.ok()) throw std::runtime_error(w.status().ToString());
  std::memcpy((*w)->region_data(0), bytes.data(), bytes.size());
  w->reset();
  s = st->Seal(rank, step);
  if (!s.ok()) throw std::runtime_error(s.ToString());
}

MemberState StateOf(TestNode& observer, const std::string& node_id) {
  auto m = observer.peer->membership().Find(node_id);
  return m ? m->state : MemberState::kDead;
}

}  // namespace reft::peer::test
