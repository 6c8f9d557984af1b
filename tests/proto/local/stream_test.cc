// The streamed restore's data socket and ring: records land in the buffers they cover, each is
// acknowledged with its ring offset, and a stream that lies about its bytes (outside every
// buffer, outside the ring) or ends early is a Protocol error, never a silent short restore.
#include <catch2/catch.hpp>

#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <thread>

#include "reft/local_proto/messages.h"
#include "reft/local_proto/stream.h"
#include "reft/mapped_memfd.h"

using namespace reft;
using namespace reft::local_proto;

namespace {

std::vector<uint8_t> Pattern(size_t n, uint8_t seed) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(i * 7 + seed);
  return v;
}

struct Ring {
  MappedMemfd mem;
  int fd() const { return mem.fd(); }
};

Ring MakeRing(uint64_t size) {
  auto mem = MappedMemfd::Create("test-ring", size);
  REQUIRE(mem.ok());
  REQUIRE(mem->SealFutureWrites().ok());
  return Ring{std::move(*mem)};
}

// reftd's side: each record's bytes placed in the ring one after the other, its header written,
// then every acknowledgement read (into `acked`) before the writer's end closes.
std::thread Writer(UniqueFd sock, Ring* ring,
                   std::vector<std::pair<uint64_t, std::vector<uint8_t>>> records,
                   std::vector<uint64_t>* acked) {
  return std::thread([sock = std::move(sock), ring, records = std::move(records), acked]() mutable {
    uint64_t at = 0;
    for (const auto& [offset, bytes] : records) {
      std::memcpy(ring->mem.data() + at, bytes.data(), bytes.size());
      if (!WriteStreamRecord(sock.get(), {offset, bytes.size(), at}, 5000).ok()) break;
      at += bytes.size();
    }
    for (size_t i = 0; i < records.size(); ++i) {
      auto ack = ReadStreamAck(sock.get(), 5000);
      if (!ack.ok()) break;
      acked->push_back(*ack);
    }
    sock.reset();
  });
}

// Writes raw `bytes` on the writer's end, then closes it.
std::thread RawWriter(UniqueFd sock, std::vector<uint8_t> bytes) {
  return std::thread([sock = std::move(sock), bytes = std::move(bytes)]() mutable {
    REQUIRE(::send(sock.get(), bytes.data(), bytes.size(), MSG_NOSIGNAL) ==
            static_cast<ssize_t>(bytes.size()));
    sock.reset();
  });
}

}  // namespace

TEST_CASE("a restore stream fills its targets from the ring and acknowledges every record") {
  auto pair = StreamSocketPair();
  REQUIRE(pair.ok());
  Ring ring = MakeRing(16 << 20);
  // Two buffers back to back (the canonical vector), a third after a gap (a unique buffer).
  std::vector<uint8_t> a(3 << 20, 0), b(5 << 20, 0), c(4096, 0);
  const std::vector<StreamTarget> targets = {
      {uint64_t(3) << 20, b.size(), b.data()}, {0, a.size(), a.data()}, {12 << 20, c.size(), c.data()}};
  const auto state = Pattern(8 << 20, 1);  // a and b as the state holds them
  const auto unique = Pattern(4096, 9);
  // Records out of order, one crossing the a|b boundary, sizes that are not chunk multiples.
  std::vector<std::pair<uint64_t, std::vector<uint8_t>>> records;
  records.push_back({12 << 20, unique});
  records.push_back({(2 << 20) + 5, {state.begin() + (2 << 20) + 5, state.begin() + (6 << 20)}});
  records.push_back({6 << 20, {state.begin() + (6 << 20), state.end()}});
  records.push_back({0, {state.begin(), state.begin() + (2 << 20) + 5}});
  std::vector<uint64_t> acked;
  std::thread writer = Writer(std::move(pair->first), &ring, records, &acked);
  auto got = ReceiveStream(pair->second.get(), ring.fd(), targets, 5000);
  writer.join();
  REQUIRE(got.ok());
  CHECK(*got == a.size() + b.size() + c.size());
  CHECK(std::equal(a.begin(), a.end(), state.begin()));
  CHECK(std::equal(b.begin(), b.end(), state.begin() + a.size()));
  CHECK(c == unique);
  // Each record's ring offset, in the order sent.
  std::vector<uint64_t> expected;
  uint64_t at = 0;
  for (const auto& r : records) {
    expected.push_back(at);
    at += r.second.size();
  }
  CHECK(acked == expected);
}

TEST_CASE("a restore stream record outside every buffer, or outside the ring, is a Protocol error") {
  auto pair = StreamSocketPair();
  REQUIRE(pair.ok());
  Ring ring = MakeRing(1 << 20);
  std::vector<uint8_t> a(4096, 0), c(4096, 0);
  const std::vector<StreamTarget> targets = {{0, a.size(), a.data()}, {8192, c.size(), c.data()}};
  std::vector<uint64_t> acked;
  SECTION("in the gap between two buffers") {
    std::thread writer = Writer(std::move(pair->first), &ring, {{4000, Pattern(200, 3)}}, &acked);
    auto got = ReceiveStream(pair->second.get(), ring.fd(), targets, 5000);
    pair->second.reset();
    writer.join();
    REQUIRE(got.status().code() == StatusCode::kProtocol);
    CHECK(got.status().message().find("belongs to no buffer") != std::string::npos);
  }
  SECTION("past the last buffer") {
    std::thread writer = Writer(std::move(pair->first), &ring, {{8192, Pattern(4097, 3)}}, &acked);
    auto got = ReceiveStream(pair->second.get(), ring.fd(), targets, 5000);
    pair->second.reset();
    writer.join();
    CHECK(got.status().code() == StatusCode::kProtocol);
  }
  SECTION("wrapping around the offset space") {
    std::thread writer =
        Writer(std::move(pair->first), &ring, {{~uint64_t(0) - 10, Pattern(64, 3)}}, &acked);
    auto got = ReceiveStream(pair->second.get(), ring.fd(), targets, 5000);
    pair->second.reset();
    writer.join();
    CHECK(got.status().code() == StatusCode::kProtocol);
  }
  SECTION("bytes said to lie past the end of the ring, or wrapping around it") {
    const uint64_t ring_offset = GENERATE(uint64_t(1 << 20) - 100, ~uint64_t(0) - 50);
    std::vector<uint8_t> header(kStreamRecordHeaderSize, 0);
    header[9] = 0x01;  // 256 bytes at state offset 0
    for (int i = 0; i < 8; ++i) header[16 + i] = static_cast<uint8_t>(ring_offset >> (8 * i));
    std::thread writer = RawWriter(std::move(pair->first), header);
    auto got = ReceiveStream(pair->second.get(), ring.fd(), targets, 5000);
    writer.join();
    REQUIRE(got.status().code() == StatusCode::kProtocol);
    CHECK(got.status().message().find("outside") != std::string::npos);
    CHECK(std::all_of(a.begin(), a.end(), [](uint8_t v) { return v == 0; }));
  }
  CHECK(acked.empty());  // nothing was taken: nothing acknowledged
}

TEST_CASE("a restore stream cut inside a header is a Protocol error, a short one is counted") {
  auto pair = StreamSocketPair();
  REQUIRE(pair.ok());
  Ring ring = MakeRing(1 << 20);
  std::vector<uint8_t> a(1 << 20, 0);
  const std::vector<StreamTarget> targets = {{0, a.size(), a.data()}};
  SECTION("inside a header") {
    std::thread writer = RawWriter(std::move(pair->first), {1, 2, 3, 4, 5});
    auto got = ReceiveStream(pair->second.get(), ring.fd(), targets, 5000);
    writer.join();
    REQUIRE(got.status().code() == StatusCode::kProtocol);
    CHECK(got.status().message().find("inside a record header") != std::string::npos);
  }
  SECTION("a clean end after fewer bytes than placed: received tells the caller") {
    std::vector<uint64_t> acked;
    std::thread writer = Writer(std::move(pair->first), &ring, {{0, Pattern(4096, 2)}}, &acked);
    auto got = ReceiveStream(pair->second.get(), ring.fd(), targets, 5000);
    writer.join();
    REQUIRE(got.ok());
    CHECK(*got == 4096);  // the client compares it with the placed total
    CHECK(acked == std::vector<uint64_t>{0});
  }
}

TEST_CASE("targets that overlap are refused before reading") {
  auto pair = StreamSocketPair();
  REQUIRE(pair.ok());
  Ring ring = MakeRing(4096);
  std::vector<uint8_t> a(8192), b(8192);
  auto got = ReceiveStream(pair->second.get(), ring.fd(),
                           {{0, a.size(), a.data()}, {4096, b.size(), b.data()}}, 1000);
  CHECK(got.status().code() == StatusCode::kProtocol);
}

TEST_CASE("reftd's end: a reader that stopped reading times out, one that left is told") {
  auto pair = StreamSocketPair();
  REQUIRE(pair.ok());
  SECTION("writing records") {
    Status st;
    for (int i = 0; i < 1000000 && st.ok(); ++i) {  // until the socket buffer is full
      st = WriteStreamRecord(pair->first.get(), {0, 4096, 0}, 200);
    }
    CHECK(st.code() == StatusCode::kTimeout);
    pair->second.reset();
    st = WriteStreamRecord(pair->first.get(), {0, 4096, 0}, 200);
    CHECK(st.code() == StatusCode::kUnavailable);
  }
  SECTION("waiting for an acknowledgement") {
    auto ack = ReadStreamAck(pair->first.get(), 200);
    CHECK(ack.status().code() == StatusCode::kTimeout);
    CHECK(ack.status().message().find("stopped reading") != std::string::npos);
    pair->second.reset();
    ack = ReadStreamAck(pair->first.get(), 200);
    CHECK(ack.status().code() == StatusCode::kUnavailable);
  }
}

TEST_CASE("the restore request's stream flag round-trips and old payloads stay valid") {
  Limits l;
  RestoreRequest r, r2;
  r.stream = true;
  REQUIRE(Decode(Encode(r), l, &r2).ok());
  CHECK(r2.stream);
  CHECK_FALSE(r2.reshape);
  REQUIRE(Decode(std::vector<uint8_t>{}, l, &r2).ok());  // an older client: no flags at all
  CHECK_FALSE(r2.stream);
  CHECK(Decode(std::vector<uint8_t>{16}, l, &r2).code() == StatusCode::kProtocol);  // unknown bit
}
