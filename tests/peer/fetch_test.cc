// FetchRegion: bit-exact chunked transfer, corruption detection, manifests, bandwidth limit;
// each over both transports (the gRPC stream, and the bulk connection the holder offers).
#include <catch2/catch.hpp>
#include <chrono>
#include <cstring>

#include "peer_fixture.h"
#include "reft/checksum.h"

using namespace reft;
using namespace reft::peer;
using namespace reft::peer::test;
using namespace reft::testing;
using namespace std::chrono_literals;

namespace {
enum class Transport { kGrpc, kBulk };

// The source offers a bulk listener and the destination asks for it only with kBulk.
struct Pair {
  /// `dst_wire_chunk` (0: the default) limits the destination's chunks and, like reftd does,
  /// its gRPC messages to that plus 4 KiB.
  explicit Pair(uint64_t chunk_size, Transport transport = Transport::kGrpc,
                uint64_t bandwidth = 0, uint64_t dst_wire_chunk = 0)
      : bulk(transport == Transport::kBulk),
        src("s", d0.path(), {}, 0, chunk_size, 0,
            [&](PeerOptions* o) { o->bulk_listen = bulk ? "127.0.0.1:0" : ""; }),
        dst("d", d1.path(), {src.address}, 0, 64 << 10, bandwidth,
            [&](PeerOptions* o) {
              o->bulk_fetch = bulk;
              if (dst_wire_chunk != 0) {
                o->wire_chunk_bytes = dst_wire_chunk;
                o->max_message_bytes = static_cast<int>(dst_wire_chunk + 4096);
              }
            }) {
    REQUIRE(peer::test::Eventually([&] { return dst.peer->membership().Find("s").has_value(); }, 3s));
  }
  /// Checks that every fetch so far took the transport under test.
  void CheckTransport() const {
    CHECK((src.peer->bulk() != nullptr) == bulk);
    if (bulk) CHECK(src.peer->bulk()->served() > 0);
  }
  const bool bulk;
  TempDir d0{"reft-peer"}, d1{"reft-peer"};
  TestNode src, dst;
};

Transport AnyTransport() { return GENERATE(Transport::kGrpc, Transport::kBulk); }
const store::RankKey kRank{"job", 1, 0, 2};
}  // namespace

TEST_CASE("FetchRegion returns the region bit-exactly, whole and in ranges", "[peer]") {
  const Transport transport = AnyTransport();
  for (uint64_t chunk_size : {uint64_t{64} << 10, uint64_t{4} << 20}) {
    Pair p(chunk_size, transport);
    auto bytes = RandomBytes((3 << 20) + 12345, TestSeed(1));
    WriteSlot(p.src.store.get(), kRank, 7, bytes);
    std::vector<uint8_t> got(bytes.size());
    REQUIRE(p.dst.peer->FetchRegion("s", kRank, 7, "params", got.data(), got.size()).ok());
    CHECK(got == bytes);
    std::vector<uint8_t> part(1500000);
    REQUIRE(p.dst.peer->FetchRegion("s", kRank, 7, "params", part.data(), part.size(), 777).ok());
    CHECK(std::equal(part.begin(), part.end(), bytes.begin() + 777));
    // Errors are clear.
    CHECK(p.dst.peer->FetchRegion("s", kRank, 8, "params", got.data(), 10).code() ==
          StatusCode::kNotFound);
    CHECK(p.dst.peer->FetchRegion("s", kRank, 7, "nope", got.data(), 10).code() ==
          StatusCode::kNotFound);
    CHECK(p.dst.peer->FetchRegion("s", kRank, 7, "params", got.data(), 10, bytes.size()).code() ==
          StatusCode::kInvalidArgument);

    auto m = p.dst.peer->client().GetManifest(p.src.address, "job");
    REQUIRE(m.ok());
    REQUIRE(m->slots_size() == 1);
    CHECK(m->slots(0).step() == 7);
    CHECK(m->slots(0).state() == "complete");
    REQUIRE(m->slots(0).regions_size() == 1);
    const auto& rm = m->slots(0).regions(0);
    CHECK(rm.size() == bytes.size());
    CHECK(rm.chunk_size() == chunk_size);
    REQUIRE(rm.chunk_checksums_size() == static_cast<int>((bytes.size() + chunk_size - 1) / chunk_size));
    const uint64_t last = rm.chunk_checksums_size() - 1;
    CHECK(rm.chunk_checksums(0) == Checksum64(bytes.data(), std::min<uint64_t>(chunk_size, bytes.size())));
    CHECK(rm.chunk_checksums(last) ==
          Checksum64(bytes.data() + last * chunk_size, bytes.size() - last * chunk_size));
    p.CheckTransport();
  }
}

TEST_CASE("a byte flipped in the served slot after sealing is reported as Corrupted", "[peer]") {
  const Transport transport = AnyTransport();
  SECTION("sealed chunks travel as wire chunks: the client catches it") {
    Pair p(64 << 10, transport);
    auto bytes = RandomBytes(1 << 20, TestSeed(1));
    WriteSlot(p.src.store.get(), kRank, 3, bytes);
    auto ref = p.src.store->Get(kRank, 3);
    REQUIRE(ref.ok());
    (*ref)->region_data(0)[5 * (64 << 10) + 17] ^= 0x40;
    std::vector<uint8_t> got(bytes.size());
    Status s = p.dst.peer->FetchRegion("s", kRank, 3, "params", got.data(), got.size());
    CHECK(s.code() == StatusCode::kCorrupted);
    CHECK_THAT(s.message(), Catch::Contains("chunk 5"));
    CHECK_THAT(s.message(), Catch::Contains("327680..393216"));
    p.CheckTransport();
  }
  SECTION("sealed chunks larger than wire chunks: the server refuses to send it") {
    Pair p(8 << 20, transport);  // wire chunks are at most 4 MiB
    auto bytes = RandomBytes(20 << 20, TestSeed(1));  // sealed chunk 1: bytes 8..16 MiB
    WriteSlot(p.src.store.get(), kRank, 3, bytes);
    auto ref = p.src.store->Get(kRank, 3);
    REQUIRE(ref.ok());
    (*ref)->region_data(0)[(8 << 20) + 3] ^= 1;
    std::vector<uint8_t> got(bytes.size());
    Status s = p.dst.peer->FetchRegion("s", kRank, 3, "params", got.data(), got.size());
    CHECK(s.code() == StatusCode::kCorrupted);
    CHECK_THAT(s.message(), Catch::Contains("sealed chunk 1"));
    // The first, intact sealed chunk still arrives when asked for alone.
    CHECK(p.dst.peer->FetchRegion("s", kRank, 3, "params", got.data(), 8 << 20).ok());
    p.CheckTransport();
  }
}

TEST_CASE("FetchRegion checks whole sealed chunks against the caller's manifest in one pass",
          "[peer]") {
  // 64 KiB: each sealed chunk is one wire chunk; 8 MiB: a sealed chunk arrives in 4 MiB pieces.
  const Transport transport = AnyTransport();
  for (uint64_t chunk_size : {uint64_t{64} << 10, uint64_t{8} << 20}) {
    INFO("chunk size " << chunk_size);
    Pair p(chunk_size, transport);
    auto bytes = RandomBytes((17 << 20) + 4321, TestSeed(2));
    WriteSlot(p.src.store.get(), kRank, 5, bytes);
    auto m = p.dst.peer->client().GetManifest(p.src.address, "job");
    REQUIRE(m.ok());
    REQUIRE(m->slots_size() == 1);
    const auto& rm = m->slots(0).regions(0);
    std::vector<uint64_t> table(rm.chunk_checksums().begin(), rm.chunk_checksums().end());
    FetchOptions fo;
    fo.expect_region_size = bytes.size();
    fo.expect_chunks = &table;
    fo.expect_chunk_size = chunk_size;
    std::vector<uint8_t> got(bytes.size());
    REQUIRE(p.dst.peer->client()
                .FetchRegion(p.src.address, kRank, 5, "params", got.data(), got.size(), 0, fo)
                .ok());
    CHECK(got == bytes);
    // A range starting inside a sealed chunk: the first one is the server's to check.
    std::vector<uint8_t> part(bytes.size() - 1000);
    REQUIRE(p.dst.peer->client()
                .FetchRegion(p.src.address, kRank, 5, "params", part.data(), part.size(), 1000, fo)
                .ok());
    CHECK(std::equal(part.begin(), part.end(), bytes.begin() + 1000));
    // The slot the manifest described was replaced by another with the same size: the served
    // bytes pass their own checksums but not the manifest's.
    const uint64_t changed = 1;  // with 8 MiB chunks: one hashed piece by piece
    table[changed] ^= 1;
    Status s = p.dst.peer->client().FetchRegion(p.src.address, kRank, 5, "params", got.data(),
                                                got.size(), 0, fo);
    CHECK(s.code() == StatusCode::kCorrupted);
    CHECK_THAT(s.message(), Catch::Contains("sealed chunk " + std::to_string(changed)));
    CHECK_THAT(s.message(), Catch::Contains("holder's manifest"));
    p.CheckTransport();
  }
}

TEST_CASE("a node with smaller wire chunks fetches from one with larger ones", "[peer]") {
  // The holder cuts 4 MiB chunks; the caller's channel takes 64 KiB + 4 KiB messages and its
  // receiver 64 KiB chunks, so it must ask for its size.
  const Transport transport = AnyTransport();
  Pair p(4 << 20, transport, 0, /*dst_wire_chunk=*/64 << 10);
  auto bytes = RandomBytes((5 << 20) + 777, TestSeed(1));
  WriteSlot(p.src.store.get(), kRank, 3, bytes);
  std::vector<uint8_t> got(bytes.size());
  Status st = p.dst.peer->FetchRegion("s", kRank, 3, "params", got.data(), got.size());
  REQUIRE(st.ok());
  CHECK(got == bytes);
  p.CheckTransport();
}

TEST_CASE("a caller asking for chunks below 4 KiB is refused", "[peer]") {
  TempDir dir("reft-peer");
  TestNode node("solo", dir.path(), {});
  WriteSlot(node.store.get(), kRank, 1, RandomBytes(100000, TestSeed(2)));
  auto stub = v1::Peer::NewStub(grpc::CreateChannel(node.address, grpc::InsecureChannelCredentials()));
  v1::FetchRegionRequest req;
  req.mutable_caller()->set_node_id("stranger");
  req.mutable_caller()->set_epoch(1);
  req.mutable_caller()->set_protocol_version(kProtocolVersion);
  req.mutable_rank()->set_job(kRank.job);
  req.mutable_rank()->set_pp(kRank.pp);
  req.mutable_rank()->set_tp(kRank.tp);
  req.mutable_rank()->set_dp(kRank.dp);
  req.set_step(1);
  req.set_region("params");
  for (uint32_t max_chunk : {1u, 4095u}) {
    req.set_max_chunk_bytes(max_chunk);
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + 5s);
    auto reader = stub->FetchRegion(&ctx, req);
    v1::RegionChunk chunk;
    CHECK_FALSE(reader->Read(&chunk));  // no byte sent
    grpc::Status s = reader->Finish();
    CHECK(s.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
    CHECK_THAT(s.error_message(), Catch::Contains("below the 4096"));
  }
  // The smallest allowed size is served, in chunks of that size.
  req.set_max_chunk_bytes(4096);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + 5s);
  auto reader = stub->FetchRegion(&ctx, req);
  v1::RegionChunk chunk;
  uint64_t chunks = 0, received = 0;
  while (reader->Read(&chunk)) {
    CHECK(chunk.data().size() <= 4096);
    ++chunks;
    received += chunk.data().size();
  }
  CHECK(reader->Finish().ok());
  CHECK(received == 100000);
  CHECK(chunks == (100000 + 4095) / 4096);
}

TEST_CASE("the per-peer token bucket paces FetchRegion", "[peer]") {
  Pair p(64 << 10, AnyTransport(), /*bandwidth=*/16 << 20);
  auto bytes = RandomBytes(8 << 20, TestSeed(1));
  WriteSlot(p.src.store.get(), kRank, 1, bytes);
  std::vector<uint8_t> got(bytes.size());
  auto t0 = std::chrono::steady_clock::now();
  REQUIRE(p.dst.peer->FetchRegion("s", kRank, 1, "params", got.data(), got.size()).ok());
  auto took = std::chrono::steady_clock::now() - t0;
  CHECK(got == bytes);
  // 8 MiB at 16 MiB/s with a 1 MiB burst: at least (8 - 1) / 16 s.
  CHECK(took >= 430ms);
  p.CheckTransport();
}

TEST_CASE("FetchRegion published_only serves a writing slot's region once it is published",
          "[peer]") {
  Pair p(64 << 10, AnyTransport());
  auto bytes = RandomBytes(300000, TestSeed(3));
  REQUIRE(p.src.store->ConfigureRank(kRank, {{"unique/rng", bytes.size()}, {"rest", 5000}}).ok());
  auto w = p.src.store->BeginWrite(kRank, 4);
  REQUIRE(w.ok());
  std::memcpy((*w)->region_data(0), bytes.data(), bytes.size());
  std::vector<uint8_t> got(bytes.size());
  FetchOptions pub;
  pub.published_only = true;
  // Not published yet: NotFound (the copier polls); a plain fetch never serves a writing slot.
  CHECK(p.dst.peer->client().FetchRegion(p.src.address, kRank, 4, "unique/rng", got.data(),
                                         got.size(), 0, pub).code() == StatusCode::kNotFound);
  REQUIRE(p.src.store->Publish(kRank, 4, {"unique/rng"}).ok());
  CHECK(p.dst.peer->client().FetchRegion(p.src.address, kRank, 4, "unique/rng", got.data(),
                                         got.size()).code() == StatusCode::kNotFound);
  REQUIRE(p.dst.peer->client().FetchRegion(p.src.address, kRank, 4, "unique/rng", got.data(),
                                           got.size(), 0, pub).ok());
  CHECK(got == bytes);
  // Only the published region is served.
  std::vector<uint8_t> rest(5000);
  CHECK(p.dst.peer->client().FetchRegion(p.src.address, kRank, 4, "rest", rest.data(),
                                         rest.size(), 0, pub).code() == StatusCode::kNotFound);
  // A caller whose buffer has another size than the region is refused, never given a prefix.
  pub.expect_region_size = bytes.size() + 1;
  Status s = p.dst.peer->client().FetchRegion(p.src.address, kRank, 4, "unique/rng", got.data(),
                                              got.size(), 0, pub);
  CHECK(s.code() == StatusCode::kInvalidArgument);
  CHECK_THAT(s.message(), Catch::Contains("expects"));
  // Bytes changed after Publish are caught against the checksums Publish recorded.
  pub.expect_region_size = bytes.size();
  (*w)->region_data(0)[70000] ^= 4;
  s = p.dst.peer->client().FetchRegion(p.src.address, kRank, 4, "unique/rng", got.data(),
                                       got.size(), 0, pub);
  CHECK(s.code() == StatusCode::kCorrupted);
  // Unpublish withdraws it.
  p.src.store->Unpublish(kRank);
  CHECK(p.dst.peer->client().FetchRegion(p.src.address, kRank, 4, "unique/rng", got.data(),
                                         got.size(), 0, pub).code() == StatusCode::kNotFound);
}

TEST_CASE("GetManifest lists the ranks whose trainer is connected to the node", "[peer]") {
  Pair p(64 << 10);
  const JobLayout layout{4, 1, 1, 0};
  const store::RankKey r1{"job", 0, 0, 1}, r3{"job", 0, 0, 3}, other{"other", 0, 0, 0};
  REQUIRE(p.src.peer->coordinator()->Join(r1, layout).ok());
  REQUIRE(p.src.peer->coordinator()->Join(r3, layout).ok());
  REQUIRE(p.src.peer->coordinator()->Join(other, {1, 1, 1, 0}).ok());
  auto m = p.dst.peer->client().GetManifest(p.src.address, "job");
  REQUIRE(m.ok());
  REQUIRE(m->joined_size() == 2);
  CHECK(m->joined(0).dp() == 1);
  CHECK(m->joined(1).dp() == 3);
  CHECK(p.src.peer->coordinator()->IsJoined(r3));
  p.src.peer->coordinator()->Leave(r3);
  CHECK_FALSE(p.src.peer->coordinator()->IsJoined(r3));
  m = p.dst.peer->client().GetManifest(p.src.address, "");
  REQUIRE(m.ok());
  CHECK(m->joined_size() == 2);  // job/dp1 and other/dp0
}
