// Streamed restores on the local channel: the bytes land in the trainer's buffers, and a client
// that takes the stream badly (stops reading, hangs up half-way) costs reftd nothing.
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>

#include <chrono>
#include <cstring>

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

ClientOptions Opts(const ServerFixture& f) {
  ClientOptions o;
  o.socket_path = f.socket;
  o.job = "job1";
  return o;
}

// A committed step 1 of job1 whose one buffer "state" holds `bytes`.
void Commit(const ServerFixture& f, std::vector<uint8_t> bytes) {
  auto c = Client::Connect(Opts(f));
  REQUIRE(c.ok());
  REQUIRE((*c)->Register("state", bytes.data(), bytes.size()).ok());
  REQUIRE((*c)->Snapshot(1).ok());
  REQUIRE((*c)->Fence().ok());
  REQUIRE((*c)->WaitCommitted(1, std::chrono::seconds(10)).ValueOr(false));
}

// A hand-driven session that registers "state" and asks for a streamed restore; returns the
// channel and the kRestoreStream frame (its fd: the data socket).
struct RawRestore {
  UniqueFd channel;
  Frame stream;
};
RawRestore StartRawRestore(const ServerFixture& f) {
  Limits l;
  auto s = ConnectSeqpacket(f.socket);
  REQUIRE(s.ok());
  Hello h;
  h.job = "job1";
  REQUIRE(SendFrame(s->get(), MessageType::kHello, 1, Encode(h)).ok());
  REQUIRE(RecvFrame(s->get(), l, 5000).ok());
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
  REQUIRE(stream->fds.size() == 1);
  return RawRestore{std::move(*s), std::move(*stream)};
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

TEST_CASE("a client that stops reading its restore stream is given up on; reftd keeps serving") {
  local::LocalServerOptions options;
  options.send_timeout_ms = 300;
  ServerFixture f(options);
  const auto state = RandomBytes(kState, 3);
  Commit(f, state);
  RawRestore raw = StartRawRestore(f);  // and never reads the data socket
  auto reply = RecvFrame(raw.channel.get(), Limits{}, 20000);
  REQUIRE(reply.ok());
  REQUIRE(reply->header.type == MessageType::kError);
  ErrorReply e;
  REQUIRE(Decode(reply->payload, Limits{}, &e).ok());
  CHECK(ToStatus(e).code() == StatusCode::kTimeout);
  CHECK(ToStatus(e).message().find("stopped reading") != std::string::npos);
  // The stalled session is still connected; another trainer restores normally meanwhile.
  RestoresFine(f, state);
}

TEST_CASE("a client that hangs up in the middle of its restore stream costs reftd nothing") {
  ServerFixture f;
  const auto state = RandomBytes(kState, 4);
  Commit(f, state);
  {
    RawRestore raw = StartRawRestore(f);
    auto header = ReadStreamRecordHeader(raw.stream.fds[0].get(), 10000);
    REQUIRE(header.ok());
    REQUIRE(header->has_value());
    std::vector<uint8_t> some(4096);
    REQUIRE(ReadStreamBytes(raw.stream.fds[0].get(), some.data(), some.size(), 10000).ok());
  }  // both sockets closed half-way through the first record
  CHECK(Eventually([&] { return f.server->Sessions().empty(); }));
  RestoresFine(f, state);
}
