// The bulk transport of FetchRegion: who may connect to a holder's bulk port (only a caller
// holding a ticket its authenticated FetchRegion call was given, once, from its own address),
// and what a caller does with a holder that sends bad frames, hangs, cuts the connection short
// or offers a port nobody can reach. Real sockets on loopback; the hostile holders are gRPC
// servers of the test's own that speak the documented wire format (docs/peer.md).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <cstring>
#include <functional>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "peer_fixture.h"
#include "reft/coord/gossip_control_plane.h"
#include "reft/checksum.h"
#include "reft/peer/bulk_listener.h"
#include "reft/peer/peer_client.h"
#include "reft/unique_fd.h"
#include "reft/v1/peer.grpc.pb.h"

using namespace reft;
using namespace reft::peer;
using namespace reft::testing;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

namespace {

// A blocking TCP connection to 127.0.0.1:`port`.
UniqueFd ConnectLoopback(uint16_t port) {
  UniqueFd fd(::socket(AF_INET, SOCK_STREAM, 0));
  REQUIRE(fd.valid());
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::connect(fd.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  return fd;
}

// A connection to 127.0.0.1:`port` that has sent the first `bytes` bytes of `ticket`.
UniqueFd Present(uint16_t port, const BulkListener::Ticket& ticket,
                 size_t bytes = BulkListener::Ticket().size()) {
  UniqueFd c = ConnectLoopback(port);
  REQUIRE(::send(c.get(), ticket.data(), bytes, MSG_NOSIGNAL) == static_cast<ssize_t>(bytes));
  return c;
}

// A holder's send from a gRPC handler thread (no Catch assertions there): the caller may hang
// up.
void SendFromHolder(int fd, const std::vector<uint8_t>& bytes) {
  (void)::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
}

// True when the other end closed `fd` within `within` (recv returns 0 or an error).
bool ClosedWithin(int fd, std::chrono::milliseconds within) {
  pollfd p{fd, POLLIN, 0};
  if (::poll(&p, 1, static_cast<int>(within.count())) <= 0) return false;
  uint8_t b;
  return ::recv(fd, &b, 1, MSG_DONTWAIT) <= 0;
}

void Put64(uint64_t v, uint8_t* p) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}

// One frame of the bulk connection: 24-byte header (offset, length, XXH3-64; little-endian),
// then the data.
std::vector<uint8_t> Frame(uint64_t offset, uint64_t checksum, const uint8_t* data, size_t n) {
  std::vector<uint8_t> f(24 + n);
  Put64(offset, f.data());
  Put64(n, f.data() + 8);
  Put64(checksum, f.data() + 16);
  std::memcpy(f.data() + 24, data, n);
  return f;
}

// A TCP listener on 127.0.0.1 for the hostile holder's side of the bulk connection.
struct TestListener {
  TestListener() : fd(::socket(AF_INET, SOCK_STREAM, 0)) {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    REQUIRE(::bind(fd.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
    REQUIRE(::listen(fd.get(), 4) == 0);
    REQUIRE(::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&a), &len) == 0);
    port = ntohs(a.sin_port);
  }
  UniqueFd fd;
  uint16_t port = 0;
};

// A port nothing listens on (bound, then closed: connecting to it is refused).
uint16_t DeadPort() {
  TestListener l;
  return l.port;
}

// A Peer service whose FetchRegion runs the test's script: a holder that misbehaves.
class ScriptedHolder final : public v1::Peer::Service {
 public:
  using Script = std::function<grpc::Status(const v1::FetchRegionRequest&,
                                            grpc::ServerWriter<v1::RegionChunk>*)>;
  explicit ScriptedHolder(Script script) : script_(std::move(script)) {
    grpc::ServerBuilder b;
    int port = 0;
    b.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    b.RegisterService(this);
    server_ = b.BuildAndStart();
    address = "127.0.0.1:" + std::to_string(port);
  }
  ~ScriptedHolder() override { server_->Shutdown(std::chrono::system_clock::now()); }

  grpc::Status FetchRegion(grpc::ServerContext*, const v1::FetchRegionRequest* req,
                           grpc::ServerWriter<v1::RegionChunk>* writer) override {
    (req->bulk() ? bulk_calls : stream_calls)++;
    return script_(*req, writer);
  }

  std::string address;
  std::atomic<int> bulk_calls{0}, stream_calls{0};

 private:
  Script script_;
  std::unique_ptr<grpc::Server> server_;
};

// Offers `port` with a fixed ticket; what happens on the connection is `bulk`'s.
grpc::Status Offer(grpc::ServerWriter<v1::RegionChunk>* writer, uint16_t port) {
  v1::RegionChunk offer;
  offer.set_bulk_ticket(std::string(16, 'T'));
  offer.set_bulk_port(port);
  writer->Write(offer);
  return grpc::Status::OK;
}

// Accepts one bulk connection on `l` that presents the fixed ticket; invalid otherwise (the
// script then fails the call, and the test with it). Runs on a gRPC handler thread.
UniqueFd AcceptWithTicket(TestListener& l) {
  UniqueFd c(::accept(l.fd.get(), nullptr, nullptr));
  char ticket[16];
  if (!c.valid() || ::recv(c.get(), ticket, sizeof ticket, MSG_WAITALL) != 16 ||
      std::string(ticket, 16) != std::string(16, 'T')) {
    return UniqueFd();
  }
  return c;
}

// Offers `bulk`, takes the caller's connection and sends it one 64 KiB chunk (at offset 0);
// the connection, or an invalid fd when the caller did not come with the ticket.
UniqueFd OfferAndSendFirstChunk(grpc::ServerWriter<v1::RegionChunk>* writer, TestListener& bulk) {
  Offer(writer, bulk.port);
  UniqueFd c = AcceptWithTicket(bulk);
  if (!c.valid()) return c;
  const std::vector<uint8_t> first(65536, 7);
  SendFromHolder(c.get(),
                 Frame(0, Checksum64(first.data(), first.size()), first.data(), first.size()));
  return c;
}

PeerClient BulkClient() {
  PeerOptions o = test::FastOptions("caller", {});
  o.advertise_address = "127.0.0.1:1";
  return PeerClient(o, [] {
    v1::Caller c;
    c.set_protocol_version(kProtocolVersion);
    c.set_node_id("caller");
    c.set_epoch(1);
    return c;
  });
}

const store::RankKey kRank{"job", 0, 0, 0};

v1::Caller CallerClaim() {
  v1::Caller c;
  c.set_protocol_version(kProtocolVersion);
  c.set_node_id("caller");
  c.set_epoch(1);
  c.set_address("127.0.0.1:1");
  return c;
}

// A bulk FetchRegion of kRank's region "params" at step 1, as a peer asks for it.
v1::FetchRegionRequest BulkRequest() {
  v1::FetchRegionRequest req;
  *req.mutable_caller() = CallerClaim();
  req.mutable_rank()->set_job(kRank.job);
  req.set_step(1);
  req.set_region("params");
  req.set_bulk(true);
  return req;
}

// A holder (store, PeerNode with a bulk listener) whose Peer service also answers on a Unix
// socket, where gRPC reports a caller with no IP address.
struct UnixSocketHolder {
  UnixSocketHolder(const std::string& shm_dir, const std::string& socket_dir) {
    store = test::OpenTestStore(shm_dir);
    PeerOptions o = test::FastOptions("holder", {});
    auto created = PeerNode::Create(o, store.get(), {}, coord::MakeGossipControlPlane());
    REQUIRE(created.ok());
    node = std::move(*created);
    grpc::ServerBuilder b;
    int port = 0;
    b.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    unix_address = "unix:" + socket_dir + "/peer.sock";
    b.AddListeningPort(unix_address, grpc::InsecureServerCredentials());
    node->Register(&b);
    PeerService::ConfigureServerBuilder(o, &b);
    server = b.BuildAndStart();
    REQUIRE(server);
    REQUIRE(node->Start("127.0.0.1:" + std::to_string(port)).ok());
  }
  ~UnixSocketHolder() {
    node->Stop();
    server->Shutdown(std::chrono::system_clock::now());
  }
  std::unique_ptr<store::SnapshotStore> store;
  std::unique_ptr<PeerNode> node;
  std::unique_ptr<grpc::Server> server;
  std::string unix_address;
};

}  // namespace

TEST_CASE("a bulk connection is served only with a ticket that is expected", "[peer][security]") {
  auto listener = BulkListener::Listen("127.0.0.1:0");
  REQUIRE(listener.ok());
  BulkListener& l = **listener;
  const auto never = [] { return false; };

  SECTION("the ticket its call was given: served once, a replay is refused") {
    const auto ticket = *l.Expect("127.0.0.1");
    UniqueFd c = Present(l.port(), ticket);
    auto served = l.Claim(ticket, Clock::now() + 2s, never);
    REQUIRE(served.ok());
    CHECK(served->valid());
    CHECK(l.served() == 1);
    UniqueFd replay = Present(l.port(), ticket);
    CHECK(ClosedWithin(replay.get(), 2s));
    CHECK(l.refused() == 1);
  }
  SECTION("a ticket nobody was given") {
    const auto expected = *l.Expect("127.0.0.1");
    auto guess = expected;
    guess[0] ^= 1;
    UniqueFd c = Present(l.port(), guess);
    CHECK(ClosedWithin(c.get(), 2s));
    CHECK(l.refused() == 1);
    CHECK(l.Claim(expected, Clock::now() + 200ms, never).status().code() == StatusCode::kTimeout);
  }
  SECTION("no ticket for a caller whose address is unknown: it would be good from anywhere") {
    auto t = l.Expect("");
    CHECK(t.status().code() == StatusCode::kInvalidArgument);
    CHECK(l.tickets_outstanding() == 0);
  }
  SECTION("a ticket given to a caller at another address") {
    const auto ticket = *l.Expect("10.1.2.3");
    UniqueFd c = Present(l.port(), ticket);
    CHECK(ClosedWithin(c.get(), 2s));
    CHECK(l.refused() == 1);
    CHECK(l.Claim(ticket, Clock::now() + 200ms, never).status().code() == StatusCode::kTimeout);
  }
  SECTION("half a ticket, then nothing: closed after the ticket wait") {
    const auto ticket = *l.Expect("127.0.0.1");
    UniqueFd c = Present(l.port(), ticket, 8);
    auto t0 = Clock::now();
    CHECK(ClosedWithin(c.get(), BulkListener::kTicketWait + 2s));
    CHECK(Clock::now() - t0 >= BulkListener::kTicketWait - 200ms);
    CHECK(l.refused() == 1);
    CHECK(l.served() == 0);
    CHECK(l.Claim(ticket, Clock::now(), never).status().code() == StatusCode::kTimeout);
  }
  SECTION("a flood of silent connections: the overflow is closed at once, tickets still work") {
    std::vector<UniqueFd> flood;
    for (size_t i = 0; i < BulkListener::kMaxPendingConnections; ++i) {
      flood.push_back(ConnectLoopback(l.port()));
    }
    // The listener accepts in the background: wait until it holds every flood connection.
    UniqueFd extra;
    for (auto until = Clock::now() + 5s; Clock::now() < until;) {
      extra = ConnectLoopback(l.port());
      if (ClosedWithin(extra.get(), 300ms)) break;
      flood.push_back(std::move(extra));  // accepted as one of the pending ones: keep it open
    }
    const uint64_t refused = l.refused();
    CHECK(refused >= 1);
    const size_t held = flood.size();
    flood.clear();  // the listener drops them as they close
    REQUIRE(test::Eventually([&] { return l.refused() >= refused + held; }, 5s));
    const auto ticket = *l.Expect("127.0.0.1");
    UniqueFd c = Present(l.port(), ticket);
    CHECK(l.Claim(ticket, Clock::now() + 3s, never).ok());
  }
  SECTION("a call that ends before its connection arrives spends its ticket") {
    const auto ticket = *l.Expect("127.0.0.1");
    CHECK(l.Claim(ticket, Clock::now() + 2s, [] { return true; }).status().code() ==
          StatusCode::kCancelled);
    UniqueFd c = Present(l.port(), ticket);
    CHECK(ClosedWithin(c.get(), 2s));
    CHECK(l.refused() == 1);
  }
}

TEST_CASE("a bulk listener on every address takes IPv4 callers with their IPv4 address",
          "[peer]") {
  auto listener = BulkListener::Listen(":0");  // "::" where the node has IPv6, else 0.0.0.0
  REQUIRE(listener.ok());
  const auto ticket = *(*listener)->Expect("127.0.0.1");
  UniqueFd c = Present((*listener)->port(), ticket);
  CHECK((*listener)->Claim(ticket, Clock::now() + 2s, [] { return false; }).ok());
  CHECK(BulkListener::Listen("192.0.2.1:0").status().code() == StatusCode::kUnavailable);  // not ours
  CHECK(BulkListener::Listen("7070").status().code() == StatusCode::kInvalidArgument);
}

TEST_CASE("PeerIpOf reads the caller's address as gRPC writes it", "[peer]") {
  CHECK(PeerIpOf("ipv4:10.0.0.2:5000") == "10.0.0.2");
  CHECK(PeerIpOf("ipv6:[::1]:5000") == "::1");
  CHECK(PeerIpOf("ipv6:%5B::1%5D:5000") == "::1");
  CHECK(PeerIpOf("ipv6:[::ffff:127.0.0.1]:7") == "127.0.0.1");
  CHECK(PeerIpOf("unix:/run/reft.sock").empty());
  // A link-local caller: gRPC escapes the zone; the accepted socket's address has none.
  CHECK(PeerIpOf("ipv6:%5Bfe80::1%25eth0%5D:5000") == "fe80::1");
  CHECK(PeerIpOf("ipv6:%5b::1%5d:5000") == "::1");
}

TEST_CASE("a caller checks every frame a hostile holder sends on the bulk connection",
          "[peer][security]") {
  const auto bytes = RandomBytes(3 * 65536, TestSeed(7));
  TestListener bulk;
  std::function<void(int)> misbehave;  // what the holder does after reading the ticket
  ScriptedHolder holder([&](const v1::FetchRegionRequest& req,
                            grpc::ServerWriter<v1::RegionChunk>* writer) {
    if (!req.bulk()) return grpc::Status(grpc::StatusCode::INTERNAL, "expected a bulk request");
    Offer(writer, bulk.port);
    UniqueFd c = AcceptWithTicket(bulk);
    if (!c.valid()) return grpc::Status(grpc::StatusCode::INTERNAL, "no bulk connection");
    misbehave(c.get());
    return grpc::Status::OK;
  });
  PeerClient client = BulkClient();
  // The destination has guard bytes after the range: nothing may be written there.
  std::vector<uint8_t> dst(bytes.size() + 4096, 0xAB);
  FetchOptions fo;
  fo.timeout = 1500ms;
  auto fetch = [&] {
    return client.FetchRegion(holder.address, kRank, 1, "params", dst.data(), bytes.size(), 0,
                              fo);
  };
  auto guard_intact = [&] {
    return std::all_of(dst.begin() + bytes.size(), dst.end(), [](uint8_t b) { return b == 0xAB; });
  };

  SECTION("a byte changed in transit") {
    misbehave = [&](int fd) {
      auto f = Frame(0, Checksum64(bytes.data(), 65536), bytes.data(), 65536);
      f[24 + 100] ^= 1;
      SendFromHolder(fd, f);
    };
    Status s = fetch();
    CHECK(s.code() == StatusCode::kCorrupted);
    CHECK_THAT(s.message(), Catch::Contains("chunk 0") && Catch::Contains("fails its checksum"));
  }
  SECTION("a chunk out of sequence") {
    misbehave = [&](int fd) {
      SendFromHolder(fd, Frame(65536, Checksum64(bytes.data(), 65536), bytes.data(), 65536));
    };
    Status s = fetch();
    CHECK(s.code() == StatusCode::kProtocol);
    CHECK_THAT(s.message(), Catch::Contains("out of sequence"));
  }
  SECTION("a chunk that reaches past the range") {
    misbehave = [&](int fd) {
      std::vector<uint8_t> big(bytes.size() + 4096, 0x11);
      SendFromHolder(fd, Frame(0, Checksum64(big.data(), big.size()), big.data(), big.size()));
    };
    CHECK(fetch().code() == StatusCode::kProtocol);
    CHECK(guard_intact());
  }
  SECTION("a holder that stops sending: Timeout at the call's deadline, not a hang") {
    misbehave = [&](int fd) {
      SendFromHolder(fd, Frame(0, Checksum64(bytes.data(), 65536), bytes.data(), 65536));
      std::this_thread::sleep_for(2500ms);  // past the caller's 1.5 s
    };
    auto t0 = Clock::now();
    CHECK(fetch().code() == StatusCode::kTimeout);
    CHECK(Clock::now() - t0 < 2400ms);
  }
  CHECK(guard_intact());
}

TEST_CASE("a holder that cuts the bulk connection short is reported with its own verdict",
          "[peer]") {
  TestListener bulk;
  ScriptedHolder holder([&](const v1::FetchRegionRequest&,
                            grpc::ServerWriter<v1::RegionChunk>* writer) {
    UniqueFd c = OfferAndSendFirstChunk(writer, bulk);
    if (!c.valid()) return grpc::Status(grpc::StatusCode::INTERNAL, "no bulk connection");
    c.reset();
    return grpc::Status(grpc::StatusCode::DATA_LOSS, "sealed chunk 3 fails its checksum here");
  });
  PeerClient client = BulkClient();
  std::vector<uint8_t> dst(1 << 20);
  Status s = client.FetchRegion(holder.address, kRank, 1, "params", dst.data(), dst.size());
  CHECK(s.code() == StatusCode::kCorrupted);
  CHECK_THAT(s.message(), Catch::Contains("sealed chunk 3"));
}

TEST_CASE("a bulk connection cut between the two ends does not wait for the call's deadline",
          "[peer]") {
  // The caller sees its connection end after the first chunk while the holder's end of the
  // call goes on (a reset by something in between): it cancels after a grace period.
  TestListener bulk;
  ScriptedHolder holder([&](const v1::FetchRegionRequest&,
                            grpc::ServerWriter<v1::RegionChunk>* writer) {
    UniqueFd c = OfferAndSendFirstChunk(writer, bulk);
    if (!c.valid()) return grpc::Status(grpc::StatusCode::INTERNAL, "no bulk connection");
    ::shutdown(c.get(), SHUT_WR);
    std::this_thread::sleep_for(4s);  // "still sending"
    return grpc::Status::OK;
  });
  PeerClient client = BulkClient();
  std::vector<uint8_t> dst(1 << 20);
  FetchOptions fo;
  fo.timeout = 10s;
  auto t0 = Clock::now();
  Status s = client.FetchRegion(holder.address, kRank, 1, "params", dst.data(), dst.size(), 0, fo);
  CHECK(s.code() == StatusCode::kUnavailable);
  CHECK_THAT(s.message(), Catch::Contains("after"));
  CHECK(Clock::now() - t0 < 3s);
}

TEST_CASE("a bulk port the caller cannot reach: gRPC streams for a while", "[peer]") {
  const auto bytes = RandomBytes(100000, TestSeed(9));
  const uint16_t dead = DeadPort();
  ScriptedHolder holder([&](const v1::FetchRegionRequest& req,
                            grpc::ServerWriter<v1::RegionChunk>* writer) {
    if (req.bulk()) return Offer(writer, dead);
    v1::RegionChunk chunk;
    chunk.set_offset(req.offset());
    chunk.set_length(req.length());
    chunk.set_checksum(Checksum64(bytes.data() + req.offset(), req.length()));
    chunk.set_data(bytes.data() + req.offset(), req.length());
    writer->Write(chunk);
    return grpc::Status::OK;
  });
  PeerClient client = BulkClient();
  std::vector<uint8_t> dst(bytes.size());
  REQUIRE(client.FetchRegion(holder.address, kRank, 1, "params", dst.data(), dst.size()).ok());
  CHECK(dst == bytes);
  CHECK(holder.bulk_calls == 1);
  CHECK(holder.stream_calls == 1);
  // The next call does not try the port again.
  std::fill(dst.begin(), dst.end(), 0);
  REQUIRE(client.FetchRegion(holder.address, kRank, 1, "params", dst.data(), 5000, 777).ok());
  CHECK(std::equal(dst.begin(), dst.begin() + 5000, bytes.begin() + 777));
  CHECK(holder.bulk_calls == 1);
  CHECK(holder.stream_calls == 2);
}

TEST_CASE("a bulk connection closed before its first chunk: the bytes come over gRPC",
          "[peer]") {
  // What a caller sees when the holder's listener refuses its ticket (the connection came from
  // another address than the call): the connection closes at once, the call waits.
  const auto bytes = RandomBytes(70000, TestSeed(12));
  TestListener bulk;
  std::atomic<bool> call_ended{false};
  ScriptedHolder holder([&](const v1::FetchRegionRequest& req,
                            grpc::ServerWriter<v1::RegionChunk>* writer) {
    if (req.bulk()) {
      Offer(writer, bulk.port);
      UniqueFd c(::accept(bulk.fd.get(), nullptr, nullptr));
      c.reset();
      // The holder's handler waits for a connection that will not come, until the caller
      // cancels; a server shutdown ends it too.
      for (int i = 0; i < 500 && !call_ended; ++i) std::this_thread::sleep_for(10ms);
      return grpc::Status(grpc::StatusCode::CANCELLED, "caller went away");
    }
    call_ended = true;
    v1::RegionChunk chunk;
    chunk.set_offset(0);
    chunk.set_length(bytes.size());
    chunk.set_checksum(Checksum64(bytes.data(), bytes.size()));
    chunk.set_data(bytes.data(), bytes.size());
    writer->Write(chunk);
    return grpc::Status::OK;
  });
  PeerClient client = BulkClient();
  std::vector<uint8_t> dst(bytes.size());
  auto t0 = Clock::now();
  REQUIRE(client.FetchRegion(holder.address, kRank, 1, "params", dst.data(), dst.size()).ok());
  CHECK(Clock::now() - t0 < 2s);  // not the holder's wait for a connection
  CHECK(dst == bytes);
  CHECK(holder.bulk_calls == 1);
  CHECK(holder.stream_calls == 1);
  // A holder that keeps doing it refuses this caller's tickets: after three in a row the
  // caller stops asking for the bulk transport (for a while).
  for (int i = 0; i < 3; ++i) {
    REQUIRE(client.FetchRegion(holder.address, kRank, 1, "params", dst.data(), dst.size()).ok());
  }
  CHECK(holder.bulk_calls == 3);
  CHECK(holder.stream_calls == 4);
}

TEST_CASE("a bulk offer is only accepted as the answer's first message", "[peer][security]") {
  const auto bytes = RandomBytes(200000, TestSeed(10));
  ScriptedHolder holder([&](const v1::FetchRegionRequest&,
                            grpc::ServerWriter<v1::RegionChunk>* writer) {
    v1::RegionChunk chunk;
    chunk.set_offset(0);
    chunk.set_length(1000);
    chunk.set_checksum(Checksum64(bytes.data(), 1000));
    chunk.set_data(bytes.data(), 1000);
    writer->Write(chunk);
    return Offer(writer, DeadPort());
  });
  PeerClient client = BulkClient();
  std::vector<uint8_t> dst(bytes.size());
  Status s = client.FetchRegion(holder.address, kRank, 1, "params", dst.data(), dst.size());
  CHECK(s.code() == StatusCode::kProtocol);
  CHECK_THAT(s.message(), Catch::Contains("bulk offer"));
}

TEST_CASE("concurrent bulk fetches, some abandoned at any moment, leave nothing behind",
          "[peer]") {
  // Callers whose deadline passes before the offer, between offer and connection, or in the
  // middle of the bytes, beside callers that finish: every finished fetch is bit-exact, every
  // ticket is spent, and the holder goes on serving.
  TempDir d0{"reft-peer"}, d1{"reft-peer"};
  test::TestNode src("s", d0.path(), {});
  test::TestNode dst("d", d1.path(), {src.address});
  const auto bytes = RandomBytes(6 << 20, TestSeed(11));
  test::WriteSlot(src.store.get(), kRank, 1, bytes);
  constexpr int kThreads = 4;
  constexpr int kRounds = 60;
  std::atomic<int> finished{0}, abandoned{0}, wrong{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::vector<uint8_t> got(bytes.size());
      uint64_t x = TestSeed(100) + static_cast<uint64_t>(t);
      for (int r = 0; r < kRounds; ++r) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        const uint64_t offset = (x >> 20) % (bytes.size() / 2);
        const uint64_t size = 1 + (x >> 40) % (bytes.size() - offset);
        FetchOptions fo;
        // One call in three gets a deadline it cannot keep (0.2-3 ms): it ends at a random
        // point of the exchange.
        if (r % 3 == 0) fo.timeout = std::chrono::milliseconds(1 + (x >> 33) % 3);
        Status s = dst.peer->client().FetchRegion(src.address, kRank, 1, "params", got.data(),
                                                  size, offset, fo);
        if (s.ok()) {
          finished++;
          if (!std::equal(got.begin(), got.begin() + size, bytes.begin() + offset)) wrong++;
        } else if (s.code() == StatusCode::kTimeout) {
          abandoned++;
        } else {
          wrong++;  // nothing else is expected from a healthy holder
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  INFO("finished " << finished << ", abandoned " << abandoned);
  CHECK(wrong == 0);
  CHECK(finished >= kThreads * kRounds * 2 / 3);
  const BulkListener* bulk = src.peer->bulk();
  REQUIRE(bulk != nullptr);
  // A handler notices its caller left within its poll slice.
  CHECK(test::Eventually([&] { return bulk->tickets_outstanding() == 0; }, 5s));
  // ... and the caller still fetches over the bulk transport: an abandoned call never made it
  // give the port up.
  const uint64_t served = bulk->served();
  std::vector<uint8_t> got(bytes.size());
  REQUIRE(dst.peer->client()
              .FetchRegion(src.address, kRank, 1, "params", got.data(), got.size(), 0)
              .ok());
  CHECK(got == bytes);
  CHECK(bulk->served() == served + 1);
}

TEST_CASE("a caller whose address the holder cannot read gets its bytes over gRPC, no ticket",
          "[peer][security]") {
  // A ticket bound to no address would be good from any address: whoever saw the offer (or
  // guessed nothing at all but raced the caller) could take the range.
  TempDir shm{"reft-peer"}, sockets{"reft-peer"};
  UnixSocketHolder holder(shm.path(), sockets.path());
  const auto bytes = RandomBytes(300000, TestSeed(13));
  test::WriteSlot(holder.store.get(), kRank, 1, bytes);
  const BulkListener* bulk = holder.node->bulk();
  REQUIRE(bulk != nullptr);

  auto stub = v1::Peer::NewStub(
      grpc::CreateChannel(holder.unix_address, grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + 10s);
  auto reader = stub->FetchRegion(&ctx, BulkRequest());
  std::vector<uint8_t> got;
  int offers = 0;
  for (v1::RegionChunk chunk; reader->Read(&chunk);) {
    if (!chunk.bulk_ticket().empty()) {
      offers++;
      break;  // today's holder: a ticket for "any address", then it waits for the connection
    }
    CHECK(chunk.offset() == got.size());
    got.insert(got.end(), chunk.data().begin(), chunk.data().end());
  }
  if (offers > 0) ctx.TryCancel();
  grpc::Status st = reader->Finish();
  INFO(st.error_message());
  CHECK(offers == 0);
  CHECK(st.ok());
  CHECK(got == bytes);
  CHECK(bulk->served() == 0);
  CHECK(test::Eventually([&] { return bulk->tickets_outstanding() == 0; }, 2s));

  // reftd's own client asks for the bulk transport and takes the stream it gets instead.
  PeerClient client = BulkClient();
  std::vector<uint8_t> dst(bytes.size());
  REQUIRE(client.FetchRegion(holder.unix_address, kRank, 1, "params", dst.data(), dst.size()).ok());
  CHECK(dst == bytes);
  CHECK(bulk->served() == 0);
}

TEST_CASE("a bulk send to a caller that set no deadline ends at the holder's fetch deadline",
          "[peer][security]") {
  // A caller that set no deadline and stops reading must not hold the holder's handler
  // thread, slot and connection for a day: the send runs under the deadline the holder's own
  // fetches run under (PeerOptions::fetch_deadline, 1 s here).
  TempDir d0{"reft-peer"};
  test::TestNode src("s", d0.path(), {}, 0, 64 << 10, 0,
                     [](PeerOptions* o) { o->fetch_deadline = 1000ms; });
  // Far more than the socket buffers of both ends hold.
  const auto bytes = RandomBytes(16 << 20, TestSeed(14));
  test::WriteSlot(src.store.get(), kRank, 1, bytes);
  const BulkListener* bulk = src.peer->bulk();
  REQUIRE(bulk != nullptr);

  auto stub =
      v1::Peer::NewStub(grpc::CreateChannel(src.address, grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;  // no deadline
  auto reader = stub->FetchRegion(&ctx, BulkRequest());
  v1::RegionChunk offer;
  REQUIRE(reader->Read(&offer));
  REQUIRE(offer.bulk_ticket().size() == 16);
  // Take the connection with a small receive buffer and never read from it.
  UniqueFd c(::socket(AF_INET, SOCK_STREAM, 0));
  REQUIRE(c.valid());
  int small = 4096;
  ::setsockopt(c.get(), SOL_SOCKET, SO_RCVBUF, &small, sizeof small);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(offer.bulk_port()));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::connect(c.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  REQUIRE(::send(c.get(), offer.bulk_ticket().data(), 16, MSG_NOSIGNAL) == 16);
  const auto t0 = Clock::now();

  // Today's holder would wait 24 h: end the call from here after a while instead of hanging.
  std::atomic<bool> finished{false};
  std::thread watchdog([&] {
    for (auto until = Clock::now() + 8s; Clock::now() < until && !finished;) {
      std::this_thread::sleep_for(10ms);
    }
    if (!finished) ctx.TryCancel();
  });
  for (v1::RegionChunk more; reader->Read(&more);) {
  }
  grpc::Status st = reader->Finish();
  const auto took = Clock::now() - t0;
  finished = true;
  watchdog.join();
  INFO(st.error_message() << " after "
                          << std::chrono::duration_cast<std::chrono::milliseconds>(took).count()
                          << " ms");
  CHECK(st.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED);
  CHECK(took < 4s);
  CHECK(bulk->served() == 1);
  CHECK(test::Eventually([&] { return bulk->tickets_outstanding() == 0; }, 2s));
}

namespace {

// A holder that stops answering (a SIGSTOPped process: the kernel keeps its connections, nothing
// is sent) — before its first message, or after the bulk connection's first chunk — until the
// test releases it.
struct StoppedHolder {
  explicit StoppedHolder(bool after_first_bulk_chunk)
      : holder([this, after_first_bulk_chunk](const v1::FetchRegionRequest&,
                                              grpc::ServerWriter<v1::RegionChunk>* writer) {
          UniqueFd c;
          if (after_first_bulk_chunk) c = OfferAndSendFirstChunk(writer, bulk);
          called = true;
          const auto until = Clock::now() + 20s;
          while (!released && Clock::now() < until) std::this_thread::sleep_for(10ms);
          return grpc::Status(grpc::StatusCode::UNAVAILABLE, "released");
        }) {}
  ~StoppedHolder() { released = true; }
  TestListener bulk;
  std::atomic<bool> called{false}, released{false};
  ScriptedHolder holder;
};

// Fetches from `h` on another thread with a 15 s deadline, forgets the holder's address once the
// call is in flight (what reftd does when the holder is declared dead), and returns the fetch's
// status and how long it took after the Forget.
std::pair<Status, Clock::duration> FetchThenForget(StoppedHolder& h) {
  PeerClient client = BulkClient();
  std::vector<uint8_t> dst(1 << 20);
  FetchOptions fo;
  fo.timeout = 15s;
  auto fetch = std::async(std::launch::async, [&] {
    return client.FetchRegion(h.holder.address, kRank, 1, "params", dst.data(), dst.size(), 0, fo);
  });
  REQUIRE(test::Eventually([&] { return h.called.load(); }, 5s));
  std::this_thread::sleep_for(100ms);  // into its wait (a bound on nothing: it waits either way)
  const auto forgot = Clock::now();
  client.Forget(h.holder.address);
  Status s = fetch.get();
  return {s, Clock::now() - forgot};
}

}  // namespace

TEST_CASE("a fetch from a holder that stopped answering ends when the holder is forgotten, not "
          "at its deadline",
          "[peer]") {
  for (bool bulk : {false, true}) {
    INFO((bulk ? "stopped after the bulk connection's first chunk" : "stopped before answering"));
    StoppedHolder h(bulk);
    auto [s, took] = FetchThenForget(h);
    CHECK(s.code() == StatusCode::kUnavailable);
    CHECK_THAT(s.message(), Catch::Contains("the peer left the cluster"));
    CHECK(took < 3s);
  }
}
