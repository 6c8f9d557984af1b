// The streamed restore's data socket: records land in the buffers they cover, and a stream
// that lies about its bytes or ends early is a Protocol error, never a silent short restore.
#include <catch2/catch.hpp>

#include <sys/socket.h>
#include <unistd.h>

#include <numeric>
#include <thread>

#include "reft/local_proto/messages.h"
#include "reft/local_proto/stream.h"

using namespace reft;
using namespace reft::local_proto;

namespace {

std::vector<uint8_t> Pattern(size_t n, uint8_t seed) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(i * 7 + seed);
  return v;
}

// Writes `records` (offset, bytes) from another thread, then closes the writer's end.
std::thread Writer(UniqueFd sock, std::vector<std::pair<uint64_t, std::vector<uint8_t>>> records) {
  return std::thread([sock = std::move(sock), records = std::move(records)]() mutable {
    for (const auto& [offset, bytes] : records) {
      if (!WriteStreamRecord(sock.get(), offset, bytes.data(), bytes.size(), 5000).ok()) break;
    }
    sock.reset();
  });
}

}  // namespace

TEST_CASE("a restore stream fills its targets, records spanning adjacent buffers") {
  auto pair = StreamSocketPair();
  REQUIRE(pair.ok());
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
  std::thread writer = Writer(std::move(pair->first), records);
  auto got = ReceiveStream(pair->second.get(), targets, 5000);
  writer.join();
  REQUIRE(got.ok());
  CHECK(*got == a.size() + b.size() + c.size());
  CHECK(std::equal(a.begin(), a.end(), state.begin()));
  CHECK(std::equal(b.begin(), b.end(), state.begin() + a.size()));
  CHECK(c == unique);
}

TEST_CASE("a restore stream record outside every buffer is a Protocol error") {
  auto pair = StreamSocketPair();
  REQUIRE(pair.ok());
  std::vector<uint8_t> a(4096, 0), c(4096, 0);
  const std::vector<StreamTarget> targets = {{0, a.size(), a.data()}, {8192, c.size(), c.data()}};
  SECTION("in the gap between two buffers") {
    std::thread writer = Writer(std::move(pair->first), {{4000, Pattern(200, 3)}});
    auto got = ReceiveStream(pair->second.get(), targets, 5000);
    writer.join();
    REQUIRE(got.status().code() == StatusCode::kProtocol);
    CHECK(got.status().message().find("belongs to no buffer") != std::string::npos);
  }
  SECTION("past the last buffer") {
    std::thread writer = Writer(std::move(pair->first), {{8192, Pattern(4097, 3)}});
    auto got = ReceiveStream(pair->second.get(), targets, 5000);
    writer.join();
    CHECK(got.status().code() == StatusCode::kProtocol);
  }
  SECTION("wrapping around the offset space") {
    std::thread writer = Writer(std::move(pair->first), {{~uint64_t(0) - 10, Pattern(64, 3)}});
    auto got = ReceiveStream(pair->second.get(), targets, 5000);
    writer.join();
    CHECK(got.status().code() == StatusCode::kProtocol);
  }
}

TEST_CASE("a restore stream cut inside a record or header is a Protocol error") {
  auto pair = StreamSocketPair();
  REQUIRE(pair.ok());
  std::vector<uint8_t> a(1 << 20, 0);
  const std::vector<StreamTarget> targets = {{0, a.size(), a.data()}};
  SECTION("inside the bytes") {
    std::thread writer([sock = std::move(pair->first)]() mutable {
      uint8_t header[kStreamRecordHeaderSize] = {0};
      header[8] = 0;
      header[9] = 0x10;  // 4096 bytes announced
      REQUIRE(::send(sock.get(), header, sizeof(header), MSG_NOSIGNAL) == sizeof(header));
      const auto some = Pattern(100, 1);
      REQUIRE(::send(sock.get(), some.data(), some.size(), MSG_NOSIGNAL) == 100);
      sock.reset();
    });
    auto got = ReceiveStream(pair->second.get(), targets, 5000);
    writer.join();
    REQUIRE(got.status().code() == StatusCode::kProtocol);
    CHECK(got.status().message().find("inside a record") != std::string::npos);
  }
  SECTION("inside a header") {
    std::thread writer([sock = std::move(pair->first)]() mutable {
      uint8_t header[5] = {1, 2, 3, 4, 5};
      REQUIRE(::send(sock.get(), header, sizeof(header), MSG_NOSIGNAL) == sizeof(header));
      sock.reset();
    });
    auto got = ReceiveStream(pair->second.get(), targets, 5000);
    writer.join();
    CHECK(got.status().code() == StatusCode::kProtocol);
  }
  SECTION("a clean end after fewer bytes than placed: received tells the caller") {
    std::thread writer = Writer(std::move(pair->first), {{0, Pattern(4096, 2)}});
    auto got = ReceiveStream(pair->second.get(), targets, 5000);
    writer.join();
    REQUIRE(got.ok());
    CHECK(*got == 4096);  // the client compares it with the placed total
  }
}

TEST_CASE("targets that overlap are refused before reading") {
  auto pair = StreamSocketPair();
  REQUIRE(pair.ok());
  std::vector<uint8_t> a(8192), b(8192);
  auto got = ReceiveStream(pair->second.get(), {{0, a.size(), a.data()}, {4096, b.size(), b.data()}},
                           1000);
  CHECK(got.status().code() == StatusCode::kProtocol);
}

TEST_CASE("a writer whose reader stopped reading times out; one whose reader left is told") {
  auto pair = StreamSocketPair();
  REQUIRE(pair.ok());
  const auto big = Pattern(32 << 20, 4);  // far more than a socket buffer holds
  Status st = WriteStreamRecord(pair->first.get(), 0, big.data(), big.size(), 200);
  CHECK(st.code() == StatusCode::kTimeout);
  pair->second.reset();
  st = WriteStreamRecord(pair->first.get(), 0, big.data(), 4096, 200);
  CHECK(st.code() == StatusCode::kUnavailable);
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
