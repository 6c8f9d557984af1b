// Membership: handshake, convergence, failure detection (link drop, hung peer), fencing.
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdio>
#include <cstring>
#include <mutex>

#include "peer_fixture.h"
#include "swim_membership.h"
#include "reft/v1/peer.grpc.pb.h"

extern char** environ;

using namespace reft;
using namespace reft::peer;
using namespace reft::peer::test;
using namespace reft::testing;
using namespace std::chrono_literals;

namespace {

struct Cluster {
  explicit Cluster(int n) {
    for (int i = 0; i < n; ++i) dirs.push_back(std::make_unique<TempDir>("reft-peer"));
    nodes.push_back(std::make_unique<TestNode>("n0", dirs[0]->path(), std::vector<std::string>{}));
    for (int i = 1; i < n; ++i) {
      nodes.push_back(std::make_unique<TestNode>("n" + std::to_string(i), dirs[i]->path(),
                                                 std::vector<std::string>{nodes[0]->address}));
    }
  }
  bool Converged(size_t expect_alive) {
    for (auto& n : nodes) {
      if (!n->server) continue;
      size_t alive = 0;
      for (const auto& m : n->peer->membership().LiveMembers()) {
        if (m.state == MemberState::kAlive) ++alive;
      }
      if (alive != expect_alive) return false;
    }
    return true;
  }
  std::vector<std::unique_ptr<TempDir>> dirs;
  std::vector<std::unique_ptr<TestNode>> nodes;
};

// Upper bound of detection: n probe periods to reach the target in the round robin, the
// direct and indirect probe deadlines, the suspicion timeout, plus scheduling slack.
constexpr auto kDetectBound = 3000ms;

struct Child {
  Child(const std::string& node_id, const std::string& seed, const std::string& region_bytes = "") {
    int out[2];
    REQUIRE(pipe(out) == 0);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, out[1], 1);
    posix_spawn_file_actions_addclose(&fa, out[0]);
    std::vector<const char*> argv = {REFT_PEER_TESTD, node_id.c_str(), dir.path().c_str(),
                                     seed.c_str()};
    if (!region_bytes.empty()) argv.push_back(region_bytes.c_str());
    argv.push_back(nullptr);
    REQUIRE(posix_spawn(&pid, REFT_PEER_TESTD, &fa, nullptr, const_cast<char**>(argv.data()),
                        environ) == 0);
    posix_spawn_file_actions_destroy(&fa);
    close(out[1]);
    out_ = fdopen(out[0], "r");
    std::string line = ReadLine();
    REQUIRE(line.rfind("ADDR ", 0) == 0);
    address = line.substr(5, line.size() - 6);
  }
  ~Child() {
    kill(pid, SIGKILL);
    waitpid(pid, nullptr, 0);
    fclose(out_);
  }
  std::string ReadLine() {
    char line[256] = {0};
    if (!fgets(line, sizeof line, out_)) return "";
    return line;
  }
  TempDir dir{"reft-peer"};
  pid_t pid = 0;
  std::string address;
  FILE* out_ = nullptr;
};

}  // namespace

TEST_CASE("Hello with another protocol version is refused with a clear message", "[peer]") {
  TempDir dir("reft-peer");
  TestNode node("solo", dir.path(), {});
  auto channel = grpc::CreateChannel(node.address, grpc::InsecureChannelCredentials());
  auto stub = v1::Peer::NewStub(channel);
  v1::HelloRequest req;
  req.mutable_caller()->set_node_id("stranger");
  req.mutable_caller()->set_epoch(1);
  v1::HelloResponse resp;
  // A newer daemon and the previous release (a rolling upgrade half done) are both refused.
  for (uint32_t other : {kProtocolVersion + 98, kProtocolVersion - 1}) {
    req.mutable_caller()->set_protocol_version(other);
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + 2s);
    grpc::Status s = stub->Hello(&ctx, req, &resp);
    CHECK(s.error_code() == grpc::StatusCode::FAILED_PRECONDITION);
    CHECK_THAT(s.error_message(), Catch::Contains("protocol version " + std::to_string(other) +
                                                  " of node 'stranger' is not supported"));
    CHECK_THAT(s.error_message(), Catch::Contains("speaks protocol version " +
                                                  std::to_string(kProtocolVersion)));
  }
  // The same version is accepted.
  req.mutable_caller()->set_protocol_version(kProtocolVersion);
  grpc::ClientContext ctx2;
  ctx2.set_deadline(std::chrono::system_clock::now() + 2s);
  REQUIRE(stub->Hello(&ctx2, req, &resp).ok());
  CHECK(resp.server().node_id() == "solo");
}

TEST_CASE("membership converges from one seed, and a dropped link is detected", "[peer]") {
  Cluster c(3);
  REQUIRE(peer::test::Eventually([&] { return c.Converged(2); }, 3s));
  std::atomic<int> dead_events{0};
  c.nodes[0]->peer->membership().AddListener([&](const MemberInfo& m, MemberState) {
    if (m.node_id == "n2" && m.state == MemberState::kDead) ++dead_events;
  });
  auto t0 = std::chrono::steady_clock::now();
  c.nodes[2]->Kill();
  REQUIRE(peer::test::Eventually(
      [&] {
        return StateOf(*c.nodes[0], "n2") == MemberState::kDead &&
               StateOf(*c.nodes[1], "n2") == MemberState::kDead;
      },
      kDetectBound));
  auto took = std::chrono::steady_clock::now() - t0;
  INFO("detected after " << std::chrono::duration_cast<std::chrono::milliseconds>(took).count()
                         << " ms");
  CHECK(took >= 400ms);  // never before the suspicion timeout
  CHECK(dead_events == 1);
  CHECK(StateOf(*c.nodes[0], "n1") == MemberState::kAlive);
}

// The planner's arrival trigger under gossip: the directory's default follows state changes,
// and a node that joins is heard once, by its id; one that leaves is not an arrival.
TEST_CASE("gossip membership: an arrival listener hears a node that joins", "[peer]") {
  Cluster c(2);
  REQUIRE(peer::test::Eventually([&] { return c.Converged(1); }, 3s));
  std::mutex mu;
  std::vector<std::string> arrived;
  c.nodes[0]->peer->membership().AddArrivalListener([&](const std::string& id) {
    std::lock_guard<std::mutex> lock(mu);
    arrived.push_back(id);
  });
  c.dirs.push_back(std::make_unique<TempDir>("reft-peer"));
  c.nodes.push_back(std::make_unique<TestNode>("n2", c.dirs.back()->path(),
                                               std::vector<std::string>{c.nodes[0]->address}));
  REQUIRE(peer::test::Eventually([&] {
    std::lock_guard<std::mutex> lock(mu);
    return !arrived.empty();
  }, 3s));
  c.nodes[1]->Kill();
  REQUIRE(peer::test::Eventually([&] { return StateOf(*c.nodes[0], "n1") == MemberState::kDead; }, kDetectBound));
  std::lock_guard<std::mutex> lock(mu);
  CHECK(arrived == std::vector<std::string>{"n2"});
}

TEST_CASE("gossip membership is bounded: a newcomer beyond the bound is refused by name",
          "[peer]") {
  auto bound = [](PeerOptions* o) { o->max_gossip_nodes = 3; };
  std::vector<std::unique_ptr<TempDir>> dirs;
  std::vector<std::unique_ptr<TestNode>> nodes;
  for (int i = 0; i < 4; ++i) {
    dirs.push_back(std::make_unique<TempDir>("reft-peer"));
    std::vector<std::string> seeds;
    if (i > 0) seeds.push_back(nodes[0]->address);
    nodes.push_back(std::make_unique<TestNode>("n" + std::to_string(i), dirs[i]->path(), seeds,
                                               0, 64 << 10, 0, bound));
    if (i == 2) {  // three nodes: the bound is reached
      REQUIRE(peer::test::Eventually([&] {
        return nodes[0]->peer->membership().LiveMembers().size() == 2 &&
               nodes[2]->peer->membership().LiveMembers().size() == 2;
      }, 3s));
    }
  }
  // The fourth never enters any table (not through its Hello, not through gossip), and its
  // Hello is answered with the reason.
  auto channel = grpc::CreateChannel(nodes[0]->address, grpc::InsecureChannelCredentials());
  auto stub = v1::Peer::NewStub(channel);
  v1::HelloRequest req;
  *req.mutable_caller() = nodes[3]->peer->membership().SelfCaller();
  v1::HelloResponse resp;
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + 2s);
  grpc::Status s = stub->Hello(&ctx, req, &resp);
  CHECK_FALSE(s.ok());
  CHECK_THAT(s.error_message(), Catch::Contains("at most 3 live nodes"));
  CHECK_THAT(s.error_message(), Catch::Contains("etcd"));
  CHECK_FALSE(peer::test::Eventually([&] {
    for (int i = 0; i < 3; ++i) {
      if (StateOf(*nodes[i], "n3") != MemberState::kDead) return true;  // known: a failure
    }
    return false;
  }, 1500ms));
  // A place frees up when a member dies: the newcomer gets in.
  nodes[1]->Kill();
  REQUIRE(peer::test::Eventually([&] {
    return StateOf(*nodes[0], "n3") == MemberState::kAlive;
  }, 5s));
}

TEST_CASE("a hung peer (SIGSTOP) is detected and calls to it time out", "[peer]") {
  Cluster c(2);
  Child child("hung", c.nodes[0]->address);
  const std::string& child_addr = child.address;
  const pid_t pid = child.pid;

  REQUIRE(peer::test::Eventually([&] { return StateOf(*c.nodes[0], "hung") == MemberState::kAlive &&
                                  StateOf(*c.nodes[1], "hung") == MemberState::kAlive; }, 3s));
  REQUIRE(kill(pid, SIGSTOP) == 0);
  auto t0 = std::chrono::steady_clock::now();
  REQUIRE(peer::test::Eventually([&] { return StateOf(*c.nodes[0], "hung") == MemberState::kDead &&
                                  StateOf(*c.nodes[1], "hung") == MemberState::kDead; },
                     kDetectBound));
  INFO("detected after " << std::chrono::duration_cast<std::chrono::milliseconds>(
                               std::chrono::steady_clock::now() - t0).count() << " ms");

  // Calls to the stopped process end at their deadline instead of hanging: Timeout on an
  // established stream, Unavailable when the (new) connection gets no HTTP/2 SETTINGS.
  std::vector<uint8_t> buf(1 << 20);
  auto f0 = std::chrono::steady_clock::now();
  Status fs = c.nodes[0]->peer->client().FetchRegion(child_addr, {"job", 0, 0, 0}, 1, "params",
                                                     buf.data(), buf.size());
  auto fetch_took = std::chrono::steady_clock::now() - f0;
  INFO(fs.ToString());
  CHECK((fs.code() == StatusCode::kTimeout || fs.code() == StatusCode::kUnavailable));
  CHECK(fetch_took < 2500ms);
  auto m = c.nodes[0]->peer->client().GetManifest(child_addr, "");
  CHECK((m.status().code() == StatusCode::kTimeout ||
         m.status().code() == StatusCode::kUnavailable));
  // The restore path's node-id lookup refuses a dead node at once.
  CHECK(c.nodes[0]->peer->AddressOf("hung").status().code() == StatusCode::kUnavailable);

  // Resumed, the peer learns it was declared dead: fenced, it rejoins with a new epoch.
  REQUIRE(kill(pid, SIGCONT) == 0);
  CHECK(child.ReadLine() == "FENCED\n");
  CHECK(peer::test::Eventually([&] { return StateOf(*c.nodes[0], "hung") == MemberState::kAlive; }, 3s));
}

TEST_CASE("a FetchRegion stream from a peer stopped mid-transfer ends at its deadline or the "
          "peer's death, whichever comes first",
          "[peer]") {
  TempDir d("reft-peer");
  // 16 MiB/s per peer: the 32 MiB region would take 2 s, longer than fetch_deadline (1.5 s)...
  TestNode reader("reader", d.path(), {}, 0, 64 << 10, /*bandwidth=*/16 << 20);
  Child child("source", reader.address, std::to_string(32 << 20));
  std::vector<uint8_t> buf(32 << 20);
  std::thread stopper([&] {
    std::this_thread::sleep_for(300ms);
    kill(child.pid, SIGSTOP);
  });
  auto t0 = std::chrono::steady_clock::now();
  Status s = reader.peer->client().FetchRegion(child.address, {"job", 0, 0, 0}, 1, "params",
                                               buf.data(), buf.size());
  auto took = std::chrono::steady_clock::now() - t0;
  stopper.join();
  INFO(s.ToString());
  // ...so the stream ends at its deadline (Timeout), or sooner when the membership declares the
  // stopped peer dead first and its calls are cancelled (Unavailable): it never hangs.
  const bool deadline = s.code() == StatusCode::kTimeout;
  const bool declared_dead = s.code() == StatusCode::kUnavailable &&
                             s.message().find("the peer left the cluster") != std::string::npos;
  CHECK((deadline || declared_dead));
  CHECK(took < 2500ms);
  kill(child.pid, SIGCONT);
}

TEST_CASE("a node declared dead that comes back with its old epoch is fenced", "[peer]") {
  Cluster c(3);
  REQUIRE(peer::test::Eventually([&] { return c.Converged(2); }, 3s));
  const uint64_t old_epoch = c.nodes[2]->peer->membership().epoch();
  const std::string n2_dir = c.dirs[2]->path();
  c.nodes[2].reset();
  REQUIRE(peer::test::Eventually([&] { return StateOf(*c.nodes[0], "n2") == MemberState::kDead &&
                                  StateOf(*c.nodes[1], "n2") == MemberState::kDead; },
                     kDetectBound));

  // A raw call carrying the old (node, epoch) is refused with a clear error.
  auto stub = v1::Peer::NewStub(
      grpc::CreateChannel(c.nodes[0]->address, grpc::InsecureChannelCredentials()));
  v1::GetManifestRequest req;
  req.mutable_caller()->set_protocol_version(kProtocolVersion);
  req.mutable_caller()->set_node_id("n2");
  req.mutable_caller()->set_epoch(old_epoch);
  v1::GetManifestResponse resp;
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + 2s);
  grpc::Status s = stub->GetManifest(&ctx, req, &resp);
  CHECK(s.error_code() == grpc::StatusCode::FAILED_PRECONDITION);
  CHECK_THAT(s.error_message(), Catch::StartsWith("fenced:"));
  CHECK_THAT(s.error_message(), Catch::Contains("declared dead"));

  // The node itself comes back with the old epoch: it is told, fences itself, takes a new
  // epoch and rejoins; until the daemon clears the fence its snapshots are not served.
  auto back = std::make_unique<TestNode>("n2", n2_dir,
                                         std::vector<std::string>{c.nodes[0]->address,
                                                                  c.nodes[1]->address},
                                         old_epoch);
  REQUIRE(peer::test::Eventually([&] { return back->peer->membership().IsFenced(); }, 3s));
  CHECK(back->peer->membership().epoch() != old_epoch);
  REQUIRE(peer::test::Eventually([&] { return StateOf(*c.nodes[0], "n2") == MemberState::kAlive &&
                                  StateOf(*c.nodes[1], "n2") == MemberState::kAlive; }, 3s));
  CHECK(c.nodes[0]->peer->membership().Find("n2")->epoch == back->peer->membership().epoch());
  auto stale = c.nodes[0]->peer->client().GetManifest(back->address, "");
  CHECK(stale.status().code() == StatusCode::kProtocol);
  CHECK_THAT(stale.status().message(), Catch::Contains("stale"));
  back->peer->membership().ClearFence();
  CHECK(c.nodes[0]->peer->client().GetManifest(back->address, "").ok());
}

TEST_CASE("the suspicion timeout grows with log n of the table, never below the configured one",
          "[peer]") {
  using std::chrono::milliseconds;
  const milliseconds base(2000);
  CHECK(coord::SuspicionTimeout(base, 0) == base);
  CHECK(coord::SuspicionTimeout(base, 1) == base);
  CHECK(coord::SuspicionTimeout(base, 10) == base);  // up to 10 members: the configured value
  CHECK(coord::SuspicionTimeout(base, 16) == milliseconds(2408));  // 2000 · log10(16)
  CHECK(coord::SuspicionTimeout(base, 100) == milliseconds(4000));
  CHECK(coord::SuspicionTimeout(base, 4096) == milliseconds(7225));
  for (size_t n = 1; n < 5000; n += 7) {
    CHECK(coord::SuspicionTimeout(base, n + 7) >= coord::SuspicionTimeout(base, n));
  }
}

TEST_CASE("a fact is retransmitted O(log n) times", "[peer]") {
  CHECK(coord::RetransmitLimit(1) == 4);
  CHECK(coord::RetransmitLimit(3) == 8);
  CHECK(coord::RetransmitLimit(16) == 20);
  CHECK(coord::RetransmitLimit(4096) == 52);
}

// Deltas, not the table: once every change has been sent its O(log n) times, a ping's answer
// carries the answering node alone, while a Hello (a joiner) gets the whole table; a change
// after that (a node killed) still reaches every member.
TEST_CASE("gossip sends deltas: a quiet cluster's pings carry one entry, a Hello all", "[peer]") {
  Cluster c(4);
  REQUIRE(peer::test::Eventually([&] { return c.Converged(3); }, 3s));
  auto channel = grpc::CreateChannel(c.nodes[0]->address, grpc::InsecureChannelCredentials());
  auto stub = v1::Peer::NewStub(channel);
  auto ping = [&] {
    v1::PingRequest req;
    // As n1 (known, same epoch): the ping itself changes nothing in n0's table.
    *req.mutable_caller() = c.nodes[1]->peer->membership().SelfCaller();
    v1::PingResponse resp;
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + 2s);
    REQUIRE(stub->Ping(&ctx, req, &resp).ok());
    return resp;
  };
  REQUIRE(peer::test::Eventually([&] { return ping().updates_size() == 1; }, 5s));
  v1::PingResponse quiet = ping();
  REQUIRE(quiet.updates_size() == 1);
  CHECK(quiet.updates(0).node_id() == "n0");

  v1::HelloRequest hello;
  *hello.mutable_caller() = c.nodes[1]->peer->membership().SelfCaller();
  v1::HelloResponse table;
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + 2s);
  REQUIRE(stub->Hello(&ctx, hello, &table).ok());
  CHECK(table.members_size() == 4);

  c.nodes[3]->Kill();
  REQUIRE(peer::test::Eventually(
      [&] {
        for (int i = 0; i < 3; ++i) {
          if (StateOf(*c.nodes[i], "n3") != MemberState::kDead) return false;
        }
        return true;
      },
      kDetectBound));
  CHECK(StateOf(*c.nodes[1], "n2") == MemberState::kAlive);
}
