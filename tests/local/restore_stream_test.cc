// Streamed restores on the local channel: the bytes land in the trainer's buffers, and a client
// that takes the stream badly (stops reading, hangs up half-way, acknowledges what it was not
// sent, tries to write or shrink the ring) costs reftd nothing.
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>

#include <chrono>
#include <cstring>
#include <thread>

#include "reft/client.h"
#include "reft/local_proto/messages.h"
#include "reft/local_proto/socket.h"
#include "reft/local_proto/stream.h"
#include "server_fixture.h"

using namespace reft;
using namespace reft::local_proto;
using reft::testing::Eventually;
using reft::testing::RandomBytes;
using reft::testing::ServerFixture;

namespace {

constexpr size_t kState = (8u << 20) + 5;  // far more than a socket buffer holds

// The well-behaved trainers restore job1; the hand-driven (raw) sessions restore "raw-job", the
// same state: one live session per rank, so "another trainer meanwhile" is another job's.
constexpr const char* kRawJob = "raw-job";

ClientOptions Opts(const ServerFixture& f, const std::string& job = "job1") {
  ClientOptions o;
  o.socket_path = f.socket;
  o.job = job;
  return o;
}

// A committed step 1 of job1 and of the raw sessions' job whose one buffer "state" holds
// `bytes`.
void Commit(const ServerFixture& f, std::vector<uint8_t> bytes) {
  for (const std::string job : {"job1", kRawJob}) {
    auto c = Client::Connect(Opts(f, job));
    REQUIRE(c.ok());
    REQUIRE((*c)->Register("state", bytes.data(), bytes.size()).ok());
    REQUIRE((*c)->Snapshot(1).ok());
    REQUIRE((*c)->Fence().ok());
    REQUIRE((*c)->WaitCommitted(1, std::chrono::seconds(10)).ValueOr(false));
  }
}

// A hand-driven session that registers "state" and asks for a streamed restore; returns the
// channel and the kRestoreStream frame (its fd: the data socket).
struct RawRestore {
  UniqueFd channel;
  Frame stream;
};
RawRestore StartRawRestore(const ServerFixture& f) {
  Limits l;
  // The previous raw session of the rank may still be closing (its hang-up is processed
  // asynchronously): its hello is refused AlreadyExists until then, and retried, like libreft.
  Result<UniqueFd> s = Status::Unavailable("not connected");
  for (int attempt = 0;; ++attempt) {
    s = ConnectSeqpacket(f.socket);
    REQUIRE(s.ok());
    Hello h;
    h.job = kRawJob;
    REQUIRE(SendFrame(s->get(), MessageType::kHello, 1, Encode(h)).ok());
    auto hello = RecvFrame(s->get(), l, 5000);
    REQUIRE(hello.ok());
    if (hello->header.type == MessageType::kHelloReply) break;
    ErrorReply e;
    REQUIRE(Decode(hello->payload, l, &e).ok());
    REQUIRE(e.code == static_cast<uint32_t>(StatusCode::kAlreadyExists));
    REQUIRE(attempt < 500);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  Register r;
  r.name = "state";
  r.dtype = "uint8";
  r.size = kState;
  REQUIRE(SendFrame(s->get(), MessageType::kRegister, 2, Encode(r)).ok());
  auto registered = RecvFrame(s->get(), l, 5000);
  REQUIRE(registered.ok());
  REQUIRE(registered->header.type == MessageType::kRegisterReply);
  RestoreRequest want;
  want.stream = true;
  REQUIRE(SendFrame(s->get(), MessageType::kRestore, 3, Encode(want)).ok());
  auto stream = RecvFrame(s->get(), l, 10000);
  REQUIRE(stream.ok());
  REQUIRE(stream->header.type == MessageType::kRestoreStream);
  REQUIRE(stream->fds.size() == 2);  // the data socket, the ring
  return RawRestore{std::move(*s), std::move(*stream)};
}

// The kError reply that ends a raw restore, as a Status.
Status ErrorReplyOf(const RawRestore& raw) {
  auto reply = RecvFrame(raw.channel.get(), Limits{}, 20000);
  REQUIRE(reply.ok());
  REQUIRE(reply->header.type == MessageType::kError);
  ErrorReply e;
  REQUIRE(Decode(reply->payload, Limits{}, &e).ok());
  return ToStatus(e);
}

// The first record of a raw restore's stream, read and not acknowledged.
StreamRecord FirstRecord(const RawRestore& raw) {
  auto record = ReadStreamRecord(raw.stream.fds[0].get(), 10000);
  REQUIRE(record.ok());
  REQUIRE(record->has_value());
  return **record;
}

// A well-behaved trainer restores step 1 bit-exactly, streamed.
void RestoresFine(const ServerFixture& f, const std::vector<uint8_t>& expected) {
  auto c = Client::Connect(Opts(f));
  REQUIRE(c.ok());
  std::vector<uint8_t> out(kState, 0);
  REQUIRE((*c)->Register("state", out.data(), out.size()).ok());
  auto step = (*c)->Restore();
  INFO(step.status().ToString());
  REQUIRE(step.ok());
  CHECK(step->value_or(-1) == 1);
  CHECK(out == expected);
  REQUIRE((*c)->LastRestore());
  CHECK((*c)->LastRestore()->detail.find("streamed") != std::string::npos);
}

}  // namespace

TEST_CASE("a streamed restore writes every byte into the trainer's buffers") {
  ServerFixture f;
  const auto a = RandomBytes((3u << 20) + 7, 1), b = RandomBytes(4099, 2);
  {
    auto c = Client::Connect(Opts(f));
    REQUIRE(c.ok());
    auto a1 = a, b1 = b;
    REQUIRE((*c)->Register("a", a1.data(), a1.size()).ok());
    REQUIRE((*c)->Register("b", b1.data(), b1.size()).ok());
    REQUIRE((*c)->Snapshot(1).ok());
    REQUIRE((*c)->Fence().ok());
    REQUIRE((*c)->WaitCommitted(1, std::chrono::seconds(10)).ValueOr(false));
  }
  auto c = Client::Connect(Opts(f));
  REQUIRE(c.ok());
  std::vector<uint8_t> a2(a.size(), 0), b2(b.size(), 0);
  REQUIRE((*c)->Register("a", a2.data(), a2.size()).ok());
  REQUIRE((*c)->Register("b", b2.data(), b2.size()).ok());
  auto step = (*c)->Restore();
  REQUIRE(step.ok());
  CHECK(step->value_or(-1) == 1);
  CHECK(a2 == a);
  CHECK(b2 == b);
  CHECK((*c)->LastRestore()->detail.find("streamed") != std::string::npos);
}

TEST_CASE("a client that stops reading its restore stream is given up on, reftd keeps serving") {
  local::LocalServerOptions options;
  options.send_timeout_ms = 300;
  ServerFixture f(options);
  const auto state = RandomBytes(kState, 3);
  Commit(f, state);
  RawRestore raw = StartRawRestore(f);  // and never reads the data socket
  const Status failed = ErrorReplyOf(raw);
  CHECK(failed.code() == StatusCode::kTimeout);
  CHECK(failed.message().find("stopped reading") != std::string::npos);
  // The stalled session is still connected; another trainer restores normally meanwhile.
  RestoresFine(f, state);
}

TEST_CASE("a client that hangs up in the middle of its restore stream costs reftd nothing") {
  ServerFixture f;
  const auto state = RandomBytes(kState, 4);
  Commit(f, state);
  {
    RawRestore raw = StartRawRestore(f);
    FirstRecord(raw);
  }  // both sockets closed after the first record, unacknowledged
  CHECK(Eventually([&] { return f.server->Sessions().empty(); }));
  RestoresFine(f, state);
}

TEST_CASE("a client that acknowledges a piece it was not sent fails its own restore only") {
  ServerFixture f;
  const auto state = RandomBytes(kState, 5);
  Commit(f, state);
  RawRestore raw = StartRawRestore(f);
  const int sock = raw.stream.fds[0].get();
  const StreamRecord record = FirstRecord(raw);
  // An offset inside the ring but not where a piece lies, then a real one twice: reftd must not
  // lend a slot the trainer may still be reading, nor one a fetch worker is filling.
  const uint64_t bogus = GENERATE(uint64_t(1), uint64_t(4096), ~uint64_t(0));
  REQUIRE(WriteStreamAck(sock, bogus, 1000).ok());
  REQUIRE(WriteStreamAck(sock, record.ring_offset, 1000).ok());
  REQUIRE(WriteStreamAck(sock, record.ring_offset, 1000).ok());
  const Status failed = ErrorReplyOf(raw);  // once reftd needs a slot back and reads these
  CHECK(failed.code() == StatusCode::kProtocol);
  CHECK(failed.message().find("no piece it was sent") != std::string::npos);
  RestoresFine(f, state);
}

TEST_CASE("the ring of a restore stream cannot be written, grown or shrunk by the client") {
  ServerFixture f;
  const auto state = RandomBytes(kState, 6);
  Commit(f, state);
  RawRestore raw = StartRawRestore(f);
  const int ring = raw.stream.fds[1].get();
  struct stat st {};
  REQUIRE(::fstat(ring, &st) == 0);
  REQUIRE(st.st_size > 0);
  // Writable mappings, writes and resizing are all refused by the seals: the client can neither
  // change a verified piece reftd is still reading (a slot capture) nor make reftd fault.
  errno = 0;
  void* w = ::mmap(nullptr, static_cast<size_t>(st.st_size), PROT_READ | PROT_WRITE, MAP_SHARED,
                   ring, 0);
  CHECK(w == MAP_FAILED);
  CHECK(errno == EPERM);
  const uint8_t byte = 1;
  CHECK(::pwrite(ring, &byte, 1, 0) < 0);
  CHECK(::ftruncate(ring, 0) != 0);
  CHECK(::ftruncate(ring, st.st_size * 2) != 0);
  void* r = ::mmap(nullptr, static_cast<size_t>(st.st_size), PROT_READ, MAP_SHARED, ring, 0);
  REQUIRE(r != MAP_FAILED);
  CHECK(::mprotect(r, static_cast<size_t>(st.st_size), PROT_READ | PROT_WRITE) != 0);
  ::munmap(r, static_cast<size_t>(st.st_size));
  raw.stream.fds.clear();  // hangs up
  RestoresFine(f, state);
}

namespace {

ino_t InodeOf(int fd) {
  struct stat st {};
  REQUIRE(::fstat(fd, &st) == 0);
  return st.st_ino;
}

// Takes a raw restore's whole stream as the client library does (copy out, acknowledge), then
// its reply; returns the ring's inode.
ino_t TakeWholeStream(RawRestore& raw, const std::vector<uint8_t>& expected) {
  SlotReply placed;
  REQUIRE(Decode(raw.stream.payload, Limits{}, &placed).ok());
  REQUIRE(placed.staged.size() == 1);
  std::vector<uint8_t> out(kState, 0);
  auto got = ReceiveStream(raw.stream.fds[0].get(), raw.stream.fds[1].get(),
                           {{placed.staged[0].file_offset, out.size(), out.data()}}, 10000);
  REQUIRE(got.ok());
  CHECK(*got == kState);
  CHECK(out == expected);
  auto reply = RecvFrame(raw.channel.get(), Limits{}, 10000);
  REQUIRE(reply.ok());
  CHECK(reply->header.type == MessageType::kRestoreReply);
  return InodeOf(raw.stream.fds[1].get());
}

}  // namespace

TEST_CASE("a ring is reused by the owner's next restore only once every piece came back") {
  ServerFixture f;
  const auto state = RandomBytes(kState, 7);
  Commit(f, state);
  ino_t first = 0;
  {
    RawRestore raw = StartRawRestore(f);
    first = TakeWholeStream(raw, state);
  }
  {
    RawRestore raw = StartRawRestore(f);
    CHECK(InodeOf(raw.stream.fds[1].get()) == first);  // kept, and this uid's own
    FirstRecord(raw);
  }  // hung up with a piece unacknowledged: that ring may still be read from
  CHECK(Eventually([&] { return f.server->Sessions().empty(); }));
  RawRestore raw = StartRawRestore(f);
  CHECK(InodeOf(raw.stream.fds[1].get()) != first);
  TakeWholeStream(raw, state);
}
