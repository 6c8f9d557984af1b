// LocalServer + libreft against a real store: round trips, commit, bad input, dead clients.
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>

#include <chrono>
#include <cstring>
#include <thread>

#include "reft/client.h"
#include "reft/local_proto/messages.h"
#include "reft/local_proto/socket.h"
#include "server_fixture.h"

using namespace reft;
using reft::testing::RandomBytes;
using reft::testing::ServerFixture;

namespace {

using reft::testing::Eventually;

ClientOptions Opts(const ServerFixture& f, int dp = 0, int world_dp = 1) {
  ClientOptions o;
  o.socket_path = f.socket;
  o.job = "job1";
  o.dp = dp;
  o.layout.dp = world_dp;
  return o;
}

std::unique_ptr<Client> Connect(const ClientOptions& o) {
  auto c = Client::Connect(o);
  INFO(c.status().ToString());
  REQUIRE(c.ok());
  return std::move(*c);
}

}  // namespace

TEST_CASE("staged buffers of odd sizes and offsets round-trip bit-exactly") {
  ServerFixture f;
  uint64_t seed = reft::testing::TestSeed(7);
  INFO("seed " << seed);
  const std::vector<size_t> sizes = {1, 3, 4097, (1u << 20) + 13};
  std::vector<std::vector<uint8_t>> backing;
  std::vector<std::vector<uint8_t>> want;
  auto c = Connect(Opts(f));
  for (size_t i = 0; i < sizes.size(); ++i) {
    backing.push_back(RandomBytes(sizes[i] + 7, seed + i));  // buffer starts at odd offset 7
    want.emplace_back(backing[i].begin() + 7, backing[i].end());
    REQUIRE(c->Register("buf" + std::to_string(i), backing[i].data() + 7, sizes[i]).ok());
  }
  REQUIRE(c->Restore().ok());  // nothing yet
  CHECK_FALSE(c->Restore()->has_value());
  REQUIRE(c->Snapshot(1).ok());
  REQUIRE(c->Fence().ok());
  auto committed = c->WaitCommitted(1, std::chrono::seconds(10));
  REQUIRE(committed.ok());
  CHECK(*committed);
  for (auto& b : backing) std::memset(b.data() + 7, 0xEE, b.size() - 7);
  auto step = c->Restore();
  REQUIRE(step.ok());
  REQUIRE(step->has_value());
  CHECK(**step == 1);
  for (size_t i = 0; i < sizes.size(); ++i) {
    CHECK(std::memcmp(backing[i].data() + 7, want[i].data(), sizes[i]) == 0);
    CHECK(backing[i][6] == RandomBytes(7, seed + i)[6]);  // bytes before the buffer untouched
  }
  // A second session (the trainer restarted) restores the same step.
  REQUIRE(c->Close().ok());
  std::vector<uint8_t> fresh(sizes[3], 0);
  auto c2 = Connect(Opts(f));
  for (size_t i = 0; i < sizes.size(); ++i) {
    REQUIRE(c2->Register("buf" + std::to_string(i), backing[i].data() + 7, sizes[i]).ok());
    std::memset(backing[i].data() + 7, 0, sizes[i]);
  }
  auto s2 = c2->Restore();
  REQUIRE(s2.ok());
  CHECK(s2->value_or(-1) == 1);
  for (size_t i = 0; i < sizes.size(); ++i) {
    CHECK(std::memcmp(backing[i].data() + 7, want[i].data(), sizes[i]) == 0);
  }
}

TEST_CASE("a step commits only when every rank of the job completed it") {
  ServerFixture f;
  std::vector<uint8_t> a = RandomBytes(5000, 1), b = RandomBytes(5000, 2);
  auto c0 = Connect(Opts(f, 0, 2));
  auto c1 = Connect(Opts(f, 1, 2));
  REQUIRE(c0->Register("p", a.data(), a.size()).ok());
  REQUIRE(c1->Register("p", b.data(), b.size()).ok());
  REQUIRE(c0->Snapshot(3).ok());
  REQUIRE(c0->Fence().ok());
  auto w = c0->WaitCommitted(3, std::chrono::milliseconds(100));
  REQUIRE(w.ok());
  CHECK_FALSE(*w);
  REQUIRE(c1->Snapshot(3).ok());
  REQUIRE(c1->Fence().ok());
  CHECK(c0->WaitCommitted(3, std::chrono::seconds(10)).ValueOr(false));
  CHECK(c1->WaitCommitted(3, std::chrono::seconds(10)).ValueOr(false));
  // A rank outside the layout, or a different layout, is refused.
  auto bad = Client::Connect(Opts(f, 2, 2));
  CHECK(bad.status().code() == StatusCode::kInvalidArgument);
  auto other = Client::Connect(Opts(f, 3, 4));
  CHECK(other.status().code() == StatusCode::kInvalidArgument);
  CHECK(other.status().message().find("layout") != std::string::npos);
  // One trainer per rank: a second session of a joined rank is refused, naming the holder.
  ClientOptions twice = Opts(f, 0, 2);
  twice.connect_timeout = std::chrono::milliseconds(0);
  auto again = Client::Connect(twice);
  CHECK(again.status().code() == StatusCode::kAlreadyExists);
  CHECK(again.status().message().find("already joined on this node") != std::string::npos);
}

TEST_CASE("bad client arguments get clear errors") {
  ServerFixture f;
  ClientOptions o = Opts(f);
  o.protection = "raid5";
  CHECK(Client::Connect(o).status().code() == StatusCode::kInvalidArgument);
  o = Opts(f);
  o.job = "bad/job";
  CHECK(Client::Connect(o).status().code() == StatusCode::kInvalidArgument);
  o = Opts(f);
  o.socket_path = f.dir.path() + "/nobody.sock";
  CHECK(Client::Connect(o).status().code() == StatusCode::kUnavailable);
  auto c = Connect(Opts(f));
  std::vector<uint8_t> x(10);
  REQUIRE(c->Register("x", x.data(), x.size()).ok());
  CHECK(c->Register("x", x.data(), x.size()).code() == StatusCode::kAlreadyExists);
  CHECK(c->Register(std::string(200, 'n'), x.data(), x.size()).code() ==
        StatusCode::kInvalidArgument);
}

TEST_CASE("malformed, truncated and oversized frames are rejected and the server keeps serving") {
  ServerFixture f;
  using namespace reft::local_proto;
  auto sock = ConnectSeqpacket(f.socket);
  REQUIRE(sock.ok());
  int fd = sock->get();
  Limits l;
  auto expect_error = [&](const char* what) {
    auto r = RecvFrame(fd, l, 5000);
    INFO(what << ": " << r.status().ToString());
    REQUIRE(r.ok());
    REQUIRE(r->header.type == MessageType::kError);
    ErrorReply e;
    REQUIRE(Decode(r->payload, l, &e).ok());
    CHECK(e.code == static_cast<uint32_t>(StatusCode::kProtocol));
  };
  // Garbage shorter than a header.
  uint8_t junk[5] = {1, 2, 3, 4, 5};
  REQUIRE(::send(fd, junk, sizeof(junk), 0) == 5);
  expect_error("truncated header");
  // Valid header, lying payload length.
  std::vector<uint8_t> frame(kFrameHeaderSize + 4);
  FrameHeader h;
  h.type = MessageType::kHello;
  h.payload_length = 100;
  EncodeHeader(h, frame.data());
  REQUIRE(::send(fd, frame.data(), frame.size(), 0) > 0);
  expect_error("lying length");
  // Bad magic.
  h.payload_length = 4;
  EncodeHeader(h, frame.data());
  frame[0] ^= 0xff;
  REQUIRE(::send(fd, frame.data(), frame.size(), 0) > 0);
  expect_error("bad magic");
  // Oversized frame.
  std::vector<uint8_t> big(kFrameHeaderSize + l.max_payload_bytes + 100, 0);
  h.payload_length = static_cast<uint32_t>(big.size() - kFrameHeaderSize);
  EncodeHeader(h, big.data());
  REQUIRE(::send(fd, big.data(), big.size(), 0) > 0);
  expect_error("oversized");
  // Well-framed hello whose payload is truncated.
  Hello hello;
  hello.job = "raw-job";  // job1's rank is the client's below: one trainer per rank
  auto p = Encode(hello);
  p.resize(p.size() - 3);
  REQUIRE(SendFrame(fd, MessageType::kHello, 9, p).ok());
  expect_error("truncated payload");
  // Register before hello.
  REQUIRE(SendFrame(fd, MessageType::kRegister, 10, Encode(Register{})).ok());
  expect_error("out of order");
  // The same connection still works with a good hello, and so do new clients.
  hello.protection = "none";
  REQUIRE(SendFrame(fd, MessageType::kHello, 11, Encode(hello)).ok());
  auto r = RecvFrame(fd, l, 5000);
  REQUIRE(r.ok());
  CHECK(r->header.type == MessageType::kHelloReply);
  CHECK(r->header.request_id == 11);
  CHECK(f.server->Stats().rejected_frames >= 6);
  std::vector<uint8_t> x = RandomBytes(999, 3);
  auto c = Connect(Opts(f));
  REQUIRE(c->Register("x", x.data(), x.size()).ok());
  REQUIRE(c->Snapshot(1).ok());
  REQUIRE(c->Fence().ok());

  // A client that keeps sending garbage is disconnected; the server survives.
  auto s2 = ConnectSeqpacket(f.socket);
  REQUIRE(s2.ok());
  for (int i = 0; i < 20; ++i) (void)::send(s2->get(), junk, sizeof(junk), MSG_NOSIGNAL);
  CHECK(Eventually([&] { return f.server->Sessions().size() == 2; }));
}

TEST_CASE("a client and a reftd of different protocol versions name both versions") {
  using namespace reft::local_proto;
  Limits l;
  SECTION("reftd refuses a newer client's hello and names its release") {
    ServerFixture f;
    auto sock = ConnectSeqpacket(f.socket);
    REQUIRE(sock.ok());
    std::vector<uint8_t> frame(kFrameHeaderSize);
    FrameHeader h;
    h.version = kProtocolVersion + 1;
    h.type = MessageType::kHello;
    EncodeHeader(h, frame.data());
    REQUIRE(::send(sock->get(), frame.data(), frame.size(), 0) > 0);
    auto r = RecvFrame(sock->get(), l, 5000);
    REQUIRE(r.ok());
    REQUIRE(r->header.type == MessageType::kError);
    ErrorReply e;
    REQUIRE(Decode(r->payload, l, &e).ok());
    CHECK(e.message == "reftd " + local::LocalServerOptions{}.daemon_version +
                           ": incompatible local protocol version " +
                           std::to_string(kProtocolVersion + 1) + " (this side speaks " +
                           std::to_string(kProtocolVersion) + ")");
  }
  SECTION("a client reads an older reftd's refusal and names both versions") {
    // The older reftd: refuses the hello in its own version, as every version's reftd does.
    reft::testing::TempDir dir("reft-old-daemon");
    const std::string path = dir.path() + "/old.sock";
    UniqueFd listener(::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0));
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
    REQUIRE(::bind(listener.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0);
    REQUIRE(::listen(listener.get(), 1) == 0);
    const uint16_t old_version = kProtocolVersion - 1;
    std::thread old_daemon([&] {
      UniqueFd conn(::accept(listener.get(), nullptr, nullptr));
      (void)RecvFrame(conn.get(), l, 5000);  // not of its version: refused, as below
      ErrorReply e{static_cast<uint32_t>(StatusCode::kProtocol),
                   "reftd 0.0.9: incompatible local protocol version " +
                       std::to_string(kProtocolVersion) + " (this side speaks " +
                       std::to_string(old_version) + ")"};
      const std::vector<uint8_t> payload = Encode(e);
      std::vector<uint8_t> frame(kFrameHeaderSize + payload.size());
      FrameHeader h;
      h.version = old_version;
      h.type = MessageType::kError;
      h.payload_length = static_cast<uint32_t>(payload.size());
      EncodeHeader(h, frame.data());
      std::memcpy(frame.data() + kFrameHeaderSize, payload.data(), payload.size());
      (void)::send(conn.get(), frame.data(), frame.size(), MSG_NOSIGNAL);
    });
    reft::ClientOptions o;
    o.socket_path = path;
    o.job = "versions";
    auto c = reft::Client::Connect(o);
    old_daemon.join();
    REQUIRE_FALSE(c.ok());
    CHECK(c.status().code() == StatusCode::kProtocol);
    const std::string& m = c.status().message();
    INFO(m);
    CHECK(m.find("reftd speaks local protocol " + std::to_string(old_version)) == 0);
    CHECK(m.find("speaks " + std::to_string(kProtocolVersion) + ":") != std::string::npos);
    CHECK(m.find("reftd said: reftd 0.0.9") != std::string::npos);
  }
}

TEST_CASE("a peer whose uid is not allowed is refused") {
  if (::geteuid() != 0) {
    WARN("not root: cannot setuid to test a foreign uid");
    return;
  }
  local::LocalServerOptions o;
  o.socket_mode = 0666;  // the file mode lets nobody connect; SO_PEERCRED must refuse it
  ServerFixture f(o);
  pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    if (::setgid(65534) != 0 || ::setuid(65534) != 0) ::_exit(3);
    auto c = Client::Connect(Opts(f));
    if (c.ok()) ::_exit(1);
    ::_exit(c.status().code() == StatusCode::kPermissionDenied ? 0 : 2);
  }
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  CHECK(f.server->Stats().rejected_peers == 1);
  // And the server keeps serving allowed peers.
  std::vector<uint8_t> x(10, 1);
  auto c = Connect(Opts(f));
  REQUIRE(c->Register("x", x.data(), x.size()).ok());
}

TEST_CASE("one uid cannot take every session: past its own limit it is Busy, others are not") {
  local::LocalServerOptions o;
  o.max_sessions = 8;
  o.max_sessions_per_uid = 3;
  const bool root = ::geteuid() == 0;
  if (root) {  // a second uid connects below
    o.allowed_uids = {65534};
    o.socket_mode = 0666;
  }
  ServerFixture f(o);
  auto job = [&](int i) {
    ClientOptions c = Opts(f);
    c.job = "uid-limit-" + std::to_string(i);
    return c;
  };
  std::vector<std::unique_ptr<Client>> mine;
  for (int i = 0; i < 3; ++i) mine.push_back(Connect(job(i)));
  auto over = Client::Connect(job(3));
  REQUIRE_FALSE(over.ok());
  CHECK(over.status().code() == StatusCode::kBusy);
  CHECK_THAT(over.status().message(),
             Catch::Contains("uid " + std::to_string(::geteuid())) &&
                 Catch::Contains("local.max_sessions_per_uid = 3"));
  CHECK(f.server->Stats().rejected_peers == 1);
  if (root) {
    // The limit is per uid: nobody still gets one of the five slots left.
    pid_t child = ::fork();
    REQUIRE(child >= 0);
    if (child == 0) {
      if (::setgid(65534) != 0 || ::setuid(65534) != 0) ::_exit(3);
      ClientOptions other = Opts(f);
      other.job = "uid-limit-nobody";
      ::_exit(Client::Connect(other).ok() ? 0 : 1);
    }
    int status = 0;
    REQUIRE(::waitpid(child, &status, 0) == child);
    REQUIRE(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
  } else {
    WARN("not root: cannot setuid to show another uid still gets a session");
  }
  // A session that ends gives its uid's slot back.
  mine.pop_back();
  CHECK(Eventually([&] { return Client::Connect(job(4)).ok(); }));
}

TEST_CASE("a client SIGKILLed mid-snapshot leaves the committed step intact") {
  ServerFixture f;
  const size_t n = (4u << 20) + 5;
  std::vector<uint8_t> v1 = RandomBytes(n, 11);
  {
    auto c = Connect(Opts(f));
    std::vector<uint8_t> buf = v1;
    REQUIRE(c->Register("state", buf.data(), n).ok());
    REQUIRE(c->Snapshot(1).ok());
    REQUIRE(c->Fence().ok());
    REQUIRE(c->WaitCommitted(1, std::chrono::seconds(10)).ValueOr(false));
  }
  // The first session's hang-up is handled asynchronously: until it is, the rank is still
  // registered there and the child's Register is refused (1 run in ~40 failed so).
  REQUIRE(Eventually([&] { return f.server->Sessions().empty(); }));
  // The child begins step 2 by hand, writes half of it into the slot and is killed. Each way it
  // can fail exits with its own code (11…), which the failure below names.
  int ready[2];
  REQUIRE(::pipe(ready) == 0);
  pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    using namespace reft::local_proto;
    Limits l;
    auto s = ConnectSeqpacket(f.socket);
    if (!s.ok()) ::_exit(11);
    Hello h;
    h.job = "job1";
    if (!SendFrame(s->get(), MessageType::kHello, 1, Encode(h)).ok()) ::_exit(12);
    if (!RecvFrame(s->get(), l, 5000).ok()) ::_exit(13);
    Register r;
    r.name = "state";
    r.dtype = "uint8";
    r.size = n;
    if (!SendFrame(s->get(), MessageType::kRegister, 2, Encode(r)).ok()) ::_exit(14);
    auto registered = RecvFrame(s->get(), l, 5000);
    if (!registered.ok() || registered->header.type != MessageType::kRegisterReply) ::_exit(15);
    if (!SendFrame(s->get(), MessageType::kSnapshotBegin, 3, Encode(StepMessage{2})).ok()) ::_exit(16);
    auto reply = RecvFrame(s->get(), l, 5000);
    if (!reply.ok() || reply->header.type != MessageType::kSnapshotBeginReply) ::_exit(17);
    SlotReply slot;
    if (!Decode(reply->payload, l, &slot).ok() || reply->fds.size() != 1) ::_exit(18);
    void* p = ::mmap(nullptr, slot.file_size, PROT_READ | PROT_WRITE, MAP_SHARED,
                     reply->fds[0].get(), 0);
    if (p == MAP_FAILED) ::_exit(19);
    // dp = 1: the rank's shard is the whole "state" buffer.
    const RegionPlacement* shard = nullptr;
    for (const auto& region : slot.regions) {
      if (region.name == "rep/shard") shard = &region;
    }
    if (shard == nullptr || shard->size != n) ::_exit(20);
    std::memset(static_cast<uint8_t*>(p) + shard->file_offset, 0x5A, n / 2);
    char one = 1;
    (void)!::write(ready[1], &one, 1);
    ::pause();
    ::_exit(0);
  }
  ::close(ready[1]);  // a child that exits early makes the read below return 0, not block
  char byte = 0;
  if (::read(ready[0], &byte, 1) != 1) {
    int st = 0;
    ::waitpid(child, &st, 0);
    FAIL("child exited early with " << WEXITSTATUS(st));
  }
  ::close(ready[0]);
  ::kill(child, SIGKILL);
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  // The server notices the hang-up and discards the partial slot.
  CHECK(Eventually([&] { return f.server->Sessions().empty(); }));
  CHECK(Eventually([&] {
    for (const auto& s : f.store->List("job1")) {
      if (s.state == store::SlotState::kWriting) return false;
    }
    return true;
  }));
  for (const auto& s : f.store->List("job1")) CHECK(s.step != 2);
  auto c = Connect(Opts(f));
  std::vector<uint8_t> out(n, 0);
  REQUIRE(c->Register("state", out.data(), n).ok());
  auto step = c->Restore();
  REQUIRE(step.ok());
  CHECK(step->value_or(-1) == 1);
  CHECK(out == v1);
  // Snapshots continue normally afterwards.
  out[0] ^= 1;
  REQUIRE(c->Snapshot(2).ok());
  REQUIRE(c->Fence().ok());
  CHECK(c->WaitCommitted(2, std::chrono::seconds(10)).ValueOr(false));
}

TEST_CASE("a corrupted slot is refused with an error naming the region and chunk") {
  ServerFixture f;
  std::vector<uint8_t> a = RandomBytes(300000, 5), b = RandomBytes(1000, 6);
  auto c = Connect(Opts(f));
  REQUIRE(c->Register("a", a.data(), a.size()).ok());
  REQUIRE(c->Register("b", b.data(), b.size()).ok());
  REQUIRE(c->Snapshot(1).ok());
  REQUIRE(c->Fence().ok());
  REQUIRE(c->WaitCommitted(1, std::chrono::seconds(10)).ValueOr(false));
  store::RankKey rank{"job1", 0, 0, 0};
  auto slot = f.store->Get(rank, 1);
  REQUIRE(slot.ok());
  // dp = 1: the rank's shard holds both replicated buffers, "a" first (sorted by name).
  size_t region = *(*slot)->FindRegion("rep/shard");
  uint64_t off = (*slot)->region_file_offset(region) + 200000;  // chunk 3 of 64 KiB
  int fd = ::open((*slot)->info().path.c_str(), O_RDWR);
  REQUIRE(fd >= 0);
  uint8_t byte = 0;
  REQUIRE(::pread(fd, &byte, 1, off) == 1);
  byte ^= 0x01;
  REQUIRE(::pwrite(fd, &byte, 1, off) == 1);
  ::close(fd);
  auto r = c->Restore();
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().code() == StatusCode::kCorrupted);
  INFO(r.status().message());
  CHECK(r.status().message().find("region 'rep/shard' chunk 3") != std::string::npos);
}

TEST_CASE("the socket is private, a stale one is replaced, a live one is refused") {
  ServerFixture f;
  struct stat st{};
  REQUIRE(::stat(f.socket.c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0600);
  local::LocalServerOptions o;
  o.socket_path = f.socket;
  auto second = local::LocalServer::Create(o, f.store.get(), f.coordinator.get(),
                                      local::ClusterHooks{f.copier.get(), f.restorer.get()});
  REQUIRE(second.ok());
  CHECK((*second)->Start().code() == StatusCode::kAlreadyExists);
  // Sessions are listed for `reftctl status`.
  std::vector<uint8_t> x(4096, 1);
  auto c = Connect(Opts(f));
  REQUIRE(c->Register("x", x.data(), x.size()).ok());
  REQUIRE(c->Snapshot(1).ok());
  REQUIRE(c->Fence().ok());
  REQUIRE(c->WaitCommitted(1, std::chrono::seconds(10)).ValueOr(false));
  auto sessions = f.server->Sessions();
  REQUIRE(sessions.size() == 1);
  CHECK(sessions[0].pid == ::getpid());
  CHECK(sessions[0].rank.job == "job1");
  CHECK(sessions[0].buffers == 1);
  CHECK(sessions[0].buffer_bytes == 4096);
  CHECK(sessions[0].last_complete_step == 1);
  CHECK(sessions[0].protection == "none");
  c.reset();
  f.server->Stop();
  // A crashed daemon leaves its socket file behind: the next one replaces it.
  int fd = ::socket(AF_UNIX, SOCK_SEQPACKET, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strcpy(addr.sun_path, f.socket.c_str());
  REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0);
  ::close(fd);
  auto third = local::LocalServer::Create(o, f.store.get(), f.coordinator.get(),
                                      local::ClusterHooks{f.copier.get(), f.restorer.get()});
  REQUIRE(third.ok());
  CHECK((*third)->Start().ok());
  CHECK(Client::Connect(Opts(f)).ok());
  (*third)->Stop();
}

TEST_CASE("ring neighbours on one node copy each other's unique buffers before the commit") {
  ServerFixture f;
  const size_t n = 100001;
  std::vector<uint8_t> w = RandomBytes(n, 21);  // replicated: the same on both ranks
  std::vector<std::vector<uint8_t>> rng = {RandomBytes(77, 22), RandomBytes(77, 23)};
  std::vector<std::unique_ptr<Client>> c;
  for (int d = 0; d < 2; ++d) {
    auto o = Opts(f, d, 2);
    o.protection = "arc1";
    c.push_back(Connect(o));
    REQUIRE(c[d]->Register("w", w.data(), n).ok());
    BufferOptions unique;
    unique.kind = BufferKind::kUnique;
    REQUIRE(c[d]->Register("rng", rng[d].data(), rng[d].size(), unique).ok());
  }
  for (auto& client : c) REQUIRE(client->Snapshot(1).ok());
  for (auto& client : c) REQUIRE(client->Fence().ok());
  for (auto& client : c) CHECK(client->WaitCommitted(1, std::chrono::seconds(10)).ValueOr(false));
  // Rank 0's slot holds rank 1's unique buffer, and the other way round.
  for (int d = 0; d < 2; ++d) {
    auto slot = f.store->Get({"job1", 0, 0, d}, 1);
    REQUIRE(slot.ok());
    auto idx = (*slot)->FindRegion("peer/rng");
    REQUIRE(idx.ok());
    CHECK(std::memcmp((*slot)->region_data(*idx), rng[(d + 1) % 2].data(), 77) == 0);
  }
  // Each rank restores its own unique buffer (not the neighbour's) and the shared one.
  for (int d = 0; d < 2; ++d) {
    std::vector<uint8_t> w2(n), rng2(77);
    auto o = Opts(f, d, 2);
    o.protection = "arc1";
    c[d].reset();
    auto again = Connect(o);
    REQUIRE(again->Register("w", w2.data(), n).ok());
    BufferOptions unique;
    unique.kind = BufferKind::kUnique;
    REQUIRE(again->Register("rng", rng2.data(), 77, unique).ok());
    auto step = again->Restore();
    REQUIRE(step.ok());
    CHECK(step->value_or(-1) == 1);
    CHECK(w2 == w);
    CHECK(rng2 == rng[d]);
  }
}

TEST_CASE("a trainer that goes away while its step waits for the neighbour releases the step") {
  local::LocalServerOptions options;
  options.peer_copy_timeout_ms = 60000;  // far longer than the test may take
  ServerFixture f(options);
  std::vector<uint8_t> w = RandomBytes(4096, 31), rng = RandomBytes(64, 32);
  auto o = Opts(f, 0, 2);
  o.protection = "arc1";
  auto connect = [&] {
    auto c = Connect(o);
    REQUIRE(c->Register("w", w.data(), w.size()).ok());
    BufferOptions unique;
    unique.kind = BufferKind::kUnique;
    REQUIRE(c->Register("rng", rng.data(), rng.size(), unique).ok());
    return c;
  };
  auto c = connect();
  REQUIRE(c->Snapshot(1).ok());
  REQUIRE(c->Fence().ok());  // the fence does not wait for the neighbour's copy
  // Rank 1 never comes: step 1 of rank 0 waits for its publication. The trainer dies.
  const auto t0 = std::chrono::steady_clock::now();
  c.reset();
  CHECK(Eventually([&] { return f.server->Sessions().empty(); }));
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(10));
  // The restarted trainer may write step 1 again at once (no "already being written").
  auto again = connect();
  REQUIRE(again->Snapshot(1).ok());
  REQUIRE(again->Fence().ok());
}
