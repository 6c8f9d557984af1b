// AssembleRanges reading part of a saved group (a layer of a stage, as a transfer plan's move or
// a pipeline reshape asks): only the requested bytes are read, from the members' shards that hold
// them (a lost member's from its ARC copy); a shard that only a decode gives back makes it
// assemble the whole group. Real stores and peers on loopback (recovery_fixture.h).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstring>

#include "recovery_fixture.h"
#include "reft/recovery/reft_load.h"

using namespace reft;
using namespace reft::recovery;
using namespace reft::recovery::test;

namespace {

struct PartialRead {
  std::vector<uint8_t> bytes;
  RestoreStats stats;
  std::string detail;
};

// Bytes [begin, end) of replicated buffer `name` of the newest committed step, as node `at`
// assembles them.
PartialRead ReadPart(TestNode& at, const std::string& job, const std::string& name, uint64_t begin,
                     uint64_t end) {
  ReftLoad load(at.store.get(), at.peer.get(), RecoveryAgreement::Of(at.peer->coordinator()),
                TestOptions());
  auto described = load.DescribeNewest(job);
  REQUIRE(described.ok());
  PartialRead out;
  out.bytes.assign(end - begin, 0xee);
  RangeRequest r;
  r.name = name;
  r.begin = begin;
  r.end = end;
  r.dst = out.bytes.data();
  RegionReader reader(at.store.get(), at.peer.get());
  Fetcher fetcher(&reader, TestOptions(), &out.stats);
  Status s = AssembleRanges(described->catalog, described->view, &fetcher, {r}, &out.stats,
                            std::chrono::steady_clock::now() + std::chrono::seconds(30), &out.detail);
  INFO(s.ToString());
  REQUIRE(s.ok());
  return out;
}

std::vector<uint8_t> Expected(const JobSpec& spec, const std::string& name, int64_t step,
                              uint64_t begin, uint64_t end) {
  for (const auto& b : spec.buffers) {
    if (b.name != name) continue;
    const auto all = BufferBytes(spec, spec.Ranks()[0], b, step);
    return {all.begin() + static_cast<long>(begin), all.begin() + static_cast<long>(end)};
  }
  FAIL("no buffer " << name);
  return {};
}

uint64_t BytesRead(const RestoreStats& s) { return s.bytes_shard + s.bytes_replica + s.bytes_parity; }

}  // namespace

TEST_CASE("part of a group is read from the shards that hold it, a lost member's from its copy",
          "[recovery][reshape]") {
  Cluster c(4);
  c.Converge();
  const JobSpec spec = MakeJob(/*dp=*/4, /*tp=*/1, /*pp=*/1, "arc1", /*with_unique=*/false);
  const auto place = RotatedPlacement(spec, 4);
  c.WriteStep(spec, place, 1);
  // A range of the largest buffer that spans more than one member's shard.
  const uint64_t begin = 1000, end = 300000;
  {
    PartialRead r = ReadPart(c.node(0), spec.job, "w.layers", begin, end);
    CHECK(r.bytes == Expected(spec, "w.layers", 1, begin, end));
    CHECK(BytesRead(r.stats) == end - begin);  // not the whole group
    CHECK(r.stats.bytes_rebuilt == 0);
    CHECK_THAT(r.detail, Catch::Contains("shard range(s) read"));
  }
  c.KillAndWipe(1);
  c.Converge();
  {
    PartialRead r = ReadPart(c.node(0), spec.job, "w.layers", begin, end);
    CHECK(r.bytes == Expected(spec, "w.layers", 1, begin, end));
    CHECK(BytesRead(r.stats) == end - begin);
    CHECK(r.stats.bytes_replica > 0);  // the lost member's part from its ARC copy
    CHECK_THAT(r.detail, Catch::Contains("shard range(s) read"));
  }
}

TEST_CASE("part of a group whose lost shard only a decode gives back assembles the whole group",
          "[recovery][reshape]") {
  Cluster c(3);
  c.Converge();
  const JobSpec spec = MakeJob(/*dp=*/3, /*tp=*/1, /*pp=*/1, "aec", /*with_unique=*/false);
  const auto place = RotatedPlacement(spec, 3);
  c.WriteStep(spec, place, 1);
  c.KillAndWipe(2);
  c.Converge();
  const uint64_t begin = 0, end = 400012;  // all of w.layers: every member's shard
  PartialRead r = ReadPart(c.node(0), spec.job, "w.layers", begin, end);
  CHECK(r.bytes == Expected(spec, "w.layers", 1, begin, end));
  CHECK(r.stats.bytes_rebuilt > 0);  // decoded from the parity
  CHECK(r.stats.bytes_parity > 0);
  CHECK_THAT(r.detail, !Catch::Contains("shard range(s) read"));
}

TEST_CASE("a node lacks of a buffer what no slot of its own holds, and reads the rest locally",
          "[recovery][reshape]") {
  Cluster c(4);
  c.Converge();
  const JobSpec spec = MakeJob(/*dp=*/4, /*tp=*/1, /*pp=*/1, "arc1", /*with_unique=*/false);
  c.WriteStep(spec, RotatedPlacement(spec, 4), 1);
  TestNode& at = c.node(0);
  ReftLoad load(at.store.get(), at.peer.get(), RecoveryAgreement::Of(at.peer->coordinator()),
                TestOptions());
  auto described = load.DescribeNewest(spec.job);
  REQUIRE(described.ok());
  uint64_t size = 0;
  for (const auto& b : spec.buffers)
    if (b.name == "w.layers") size = b.size;
  auto missing = RangesNotHeldHere(described->catalog, described->view, "w.layers", 0);
  REQUIRE(missing.ok());
  // The node holds its rank's shard and an ARC copy of its neighbour's: about half of 4 shards.
  uint64_t lacking = 0, last_end = 0;
  for (const auto& [b, e] : *missing) {
    CHECK(b >= last_end);  // sorted, disjoint
    CHECK(b < e);
    lacking += e - b;
    last_end = e;
  }
  CHECK(lacking > size / 4);
  CHECK(lacking < size);
  // Reading every byte: the lacking ranges come from peers, the others from this node alone.
  auto read = [&](const std::vector<std::pair<uint64_t, uint64_t>>& ranges, RestoreStats* stats) {
    std::vector<uint8_t> buf(size, 0xee);
    std::vector<RangeRequest> reqs;
    for (const auto& [b, e] : ranges) {
      RangeRequest r;
      r.name = "w.layers";
      r.begin = b;
      r.end = e;
      r.dst = buf.data() + b;
      reqs.push_back(r);
    }
    RegionReader reader(at.store.get(), at.peer.get());
    Fetcher fetcher(&reader, TestOptions(), stats);
    REQUIRE(AssembleRanges(described->catalog, described->view, &fetcher, reqs, stats,
                           std::chrono::steady_clock::now() + std::chrono::seconds(30))
                .ok());
    return buf;
  };
  std::vector<std::pair<uint64_t, uint64_t>> held;
  uint64_t at_byte = 0;
  for (const auto& [b, e] : *missing) {
    if (b > at_byte) held.emplace_back(at_byte, b);
    at_byte = e;
  }
  if (at_byte < size) held.emplace_back(at_byte, size);
  RestoreStats from_peers, from_here;
  auto a = read(*missing, &from_peers);
  auto b = read(held, &from_here);
  CHECK(from_peers.bytes_peer == lacking);
  CHECK(from_here.bytes_peer == 0);
  CHECK(from_here.bytes_local == size - lacking);
  const auto want = Expected(spec, "w.layers", 1, 0, size);
  for (const auto& [lo, hi] : *missing) {
    CHECK(std::equal(a.begin() + lo, a.begin() + hi, want.begin() + lo));
  }
  for (const auto& [lo, hi] : held) {
    CHECK(std::equal(b.begin() + lo, b.begin() + hi, want.begin() + lo));
  }
}
