// AOR across nodes: three in-process reftd stacks (store, peer layer over gRPC on loopback,
// distributed commit, PublishedCopier, ReftLoad, LocalServer) and a ZeRO-1 job with one rank per
// node. The "aor/opt" regions are replayed; when a node is lost, its rank's optimizer shard is
// restored on a replacement node from its ring predecessor's replica (REFT-load reads
// "aor/<name>" of dp-1), bit for bit, and the job goes on replaying.
#include <catch2/catch.hpp>

#include <cstring>

#include "aor_client_steps.h"
#include "aor_sim.h"
#include "recovery_fixture.h"
#include "reft/aor/adamw.h"
#include "reft/client.h"
#include "reft/local/local_server.h"
#include "reft/recovery/published_copier.h"
#include "reft/recovery/reft_load.h"

using namespace reft;
using namespace std::chrono_literals;
using reft::aor::testing::GradMode;
using reft::testing::ToOptimizerStep;
using reft::aor::testing::StepInput;
using reft::aor::testing::TrainingLoop;
using reft::recovery::test::Cluster;

namespace {

constexpr const char* kJob = "zero1-cluster";

/// reftd's local side on one TestNode, wired as daemon/app does it.
struct LocalDaemon {
  LocalDaemon(peer::test::TestNode& node, const std::string& dir) {
    recovery::RecoveryOptions ro = recovery::test::TestOptions();
    restore = std::make_unique<recovery::ReftLoad>(
        node.store.get(), node.peer.get(),
        recovery::RecoveryAgreement::Of(node.peer->coordinator()), ro);
    copier = std::make_unique<recovery::PublishedCopier>(node.store.get(), node.peer.get(),
                                                         node.peer->coordinator(), ro);
    local::LocalServerOptions o;
    o.socket_path = dir + "/reftd.sock";
    o.copy_threads = 3;
    o.aor_resync_steps = 0;
    o.peer_copy_timeout_ms = 10000;
    o.shard_chunk = 4096;
    auto s = local::LocalServer::Create(o, node.store.get(), node.peer->coordinator(),
                                        local::ClusterHooks{copier.get(), restore.get()});
    REQUIRE(s.ok());
    server = std::move(*s);
    REQUIRE(server->Start().ok());
  }
  ~LocalDaemon() { server->Stop(); }
  std::unique_ptr<recovery::ReftLoad> restore;
  std::unique_ptr<recovery::PublishedCopier> copier;
  std::unique_ptr<local::LocalServer> server;

  local::SessionInfo Session(int dp) const {
    for (const auto& s : server->Sessions()) {
      if (s.joined && s.rank.dp == dp) return s;
    }
    return {};
  }
};

struct Trainer {
  int dp = 0;
  std::unique_ptr<Client> client;
  std::vector<float> opt;
  std::vector<float> grad;
  std::vector<uint8_t> params;

  void Connect(const std::string& socket, int world) {
    ClientOptions o;
    o.socket_path = socket;
    o.job = kJob;
    o.dp = dp;
    o.layout.dp = world;
    o.layout.zero = 1;
    o.protection = "arc1+aor";
    auto c = Client::Connect(o);
    INFO(c.status().ToString());
    REQUIRE(c.ok());
    client = std::move(*c);
    REQUIRE(client->Register("params", params.data(), params.size()).ok());
    BufferOptions ob;
    ob.kind = BufferKind::kUnique;
    ob.dtype = "float32";
    ob.optimizer = true;
    REQUIRE(client->Register("opt", opt.data(), 4 * opt.size(), ob).ok());
    BufferOptions og;
    og.kind = BufferKind::kGradient;
    og.dtype = "float32";
    REQUIRE(client->Register("grad", grad.data(), 4 * grad.size(), og).ok());
  }
};

std::vector<uint8_t> Region(store::SnapshotStore* s, int dp, int64_t step, const std::string& r) {
  auto slot = s->Get({kJob, 0, 0, dp}, step);
  INFO("dp" << dp << " step " << step << " " << r << ": " << slot.status().ToString());
  REQUIRE(slot.ok());
  auto idx = (*slot)->FindRegion(r);
  REQUIRE(idx.ok());
  const uint8_t* p = (*slot)->region_data(*idx);
  return std::vector<uint8_t>(p, p + (*slot)->region_size(*idx));
}

}  // namespace

TEST_CASE("AOR across nodes: a lost node's optimizer shard comes back from the replayed replica",
          "[local][aor][cluster]") {
  const uint64_t seed = reft::testing::TestSeed(31);
  INFO("seed " << seed);
  const int dp = 3;
  const size_t n = 5000;
  Cluster c(dp, 64 << 10);
  c.Converge();
  std::vector<std::unique_ptr<LocalDaemon>> daemons;
  for (int i = 0; i < dp; ++i) daemons.push_back(std::make_unique<LocalDaemon>(c.node(i), c.dir(i)));
  std::vector<std::string> socket(dp);
  for (int i = 0; i < dp; ++i) socket[i] = c.dir(i) + "/reftd.sock";

  TrainingLoop loop(GradMode::kFp32, n * dp, 1000, seed);
  std::vector<float> p0, m0, v0;
  loop.InitialState(&p0, &m0, &v0);
  const auto params = reft::testing::RandomBytes(30011, seed);
  std::vector<Trainer> t(dp);
  for (int d = 0; d < dp; ++d) {  // rank d on node d
    t[d].dp = d;
    t[d].opt.assign(3 * n, 0.0f);
    std::copy(p0.begin() + d * n, p0.begin() + (d + 1) * n, t[d].opt.begin());
    t[d].grad.assign(dp * n, 0.0f);
    t[d].params = params;
    t[d].Connect(socket[d], dp);
  }
  auto iterate = [&]() {
    StepInput in = loop.Next();
    for (auto& r : t) REQUIRE(r.client->Fence().ok());  // the all-reduce barrier
    for (auto& r : t) {
      std::memcpy(r.grad.data(), in.grad.data(), in.grad.size());
      aor::AdamWState own{r.opt.data(), r.opt.data() + n, r.opt.data() + 2 * n, n};
      REQUIRE(aor::AdamWUpdate(own, in.hyper, in.grad.data() + 4 * r.dp * n, in.dtype, n).ok());
      Status st = r.client->Snapshot(static_cast<int64_t>(in.hyper.iteration),
                                     ToOptimizerStep(in.hyper));
      INFO(st.ToString());
      REQUIRE(st.ok());
    }
    return static_cast<int64_t>(in.hyper.iteration);
  };
  auto commit = [&](int64_t step) {
    for (auto& r : t) REQUIRE(r.client->Fence().ok());
    for (auto& r : t) REQUIRE(r.client->WaitCommitted(step, 20s).ValueOr(false));
  };
  int64_t step = 0;
  for (int i = 0; i < 6; ++i) step = iterate();
  commit(step);
  // Rank 0 (node 0) holds rank 1's shard, replayed: one copy at the first snapshot only.
  CHECK(daemons[0]->Session(0).aor_copies == 1);
  CHECK(daemons[0]->Session(0).aor_replays == 5);
  const auto replica_of_1 = Region(c.node(0).store.get(), 0, step, "aor/opt");
  REQUIRE(std::memcmp(replica_of_1.data(), t[1].opt.data(), 12 * n) == 0);
  const std::vector<float> want1 = t[1].opt;

  // Node 1 is lost with its trainer and its memory.
  REQUIRE(t[1].client->Close().ok());
  daemons[1].reset();
  c.KillAndWipe(1);
  const size_t r1 = c.Add("r1");
  c.Converge();
  daemons.push_back(std::make_unique<LocalDaemon>(c.node(r1), c.dir(r1)));
  LocalDaemon& replacement = *daemons.back();

  // REFT-load says where rank 1's optimizer shard comes from: dp0's AOR replica.
  {
    recovery::ReftLoad load(c.node(r1).store.get(), c.node(r1).peer.get(),
                            recovery::RecoveryAgreement::Of(c.node(r1).peer->coordinator()),
                            recovery::test::TestOptions());
    auto check = load.CheckRestore(kJob);
    REQUIRE(check.ok());
    INFO(check->Summary());
    CHECK(check->step == step);
    CHECK(check->recoverable);
  }
  // The restarted trainer of rank 1 on the replacement node: its shard is zeroed, restored.
  std::fill(t[1].opt.begin(), t[1].opt.end(), 0.0f);
  std::fill(t[1].params.begin(), t[1].params.end(), 0);
  t[1].Connect(c.dir(r1) + "/reftd.sock", dp);
  auto restored = t[1].client->Restore();
  INFO(restored.status().ToString());
  REQUIRE(restored.ok());
  REQUIRE(restored->value_or(-1) == step);
  CHECK(t[1].opt == want1);  // bit for bit: the replica reftd replayed on node 0
  CHECK(t[1].params == params);
  // Rank 1's slot was regenerated on the replacement: "unique/opt" from dp0's "aor/opt".
  CHECK(Region(c.node(r1).store.get(), 1, step, "unique/opt") == replica_of_1);

  // Training goes on: node 0 keeps replaying rank 1's shard from the same gradients; the new
  // session on the replacement copies rank 2's shard once, then replays.
  for (int i = 0; i < 4; ++i) step = iterate();
  commit(step);
  store::SnapshotStore* stores[3] = {c.node(0).store.get(), c.node(r1).store.get(),
                                     c.node(2).store.get()};
  for (int d = 0; d < dp; ++d) {
    const int next = (d + 1) % dp;
    INFO("dp" << d << " holds dp" << next);
    CHECK(std::memcmp(Region(stores[d], d, step, "aor/opt").data(), t[next].opt.data(), 12 * n) ==
          0);
  }
  CHECK(daemons[0]->Session(0).aor_copies == 1);
  CHECK(daemons[0]->Session(0).aor_replays == 9);
  CHECK(replacement.Session(1).aor_copies == 1);
  CHECK(replacement.Session(1).aor_replays == 3);
  for (auto& r : t) REQUIRE(r.client->Close().ok());
}
