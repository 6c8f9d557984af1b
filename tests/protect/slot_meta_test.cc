// The "meta" region: round trip, rejection of malformed input, and partial-source encoding
// (the client and reftd each encode the part of a slot whose source memory they can read).

#include <catch2/catch.hpp>

#include <cstring>

#include "protect_fixture.h"
#include "reft/protect/slot_meta.h"

namespace reft::protect {
namespace {

SlotMeta SampleMeta() {
  SlotMeta m;
  m.job = "run-7";
  m.coord = {1, 0, 2};
  m.layout.dp = 4;
  m.layout.pp = 2;
  m.layout.zero = 1;
  m.scheme = *Scheme::Parse("arc1+aec");
  m.shard_chunk = 4096;
  m.buffers = testing::MixedBuffers(40);
  m.buffers.push_back({"opt", 4 * 1000, "fp32", BufferKind::kUnique, -1, true});
  return m;
}

Result<SlotMeta> DecodeText(const std::string& text) {
  return SlotMeta::Decode(reinterpret_cast<const uint8_t*>(text.data()), text.size());
}

}  // namespace

TEST_CASE("slot meta round-trips and recomputes the rank's plan", "[protect][meta]") {
  const SlotMeta m = SampleMeta();
  const auto bytes = m.Encode();
  auto back = SlotMeta::Decode(bytes.data(), bytes.size());
  REQUIRE(back.ok());
  CHECK(back->SameJobLayout(m));
  CHECK(back->coord == m.coord);
  auto plan = back->Plan();
  REQUIRE(plan.ok());
  auto direct = ComputeRankPlan(m.layout, m.scheme, m.coord, m.buffers, m.shard_chunk);
  REQUIRE(direct.ok());
  REQUIRE(plan->regions.size() == direct->regions.size());
  for (size_t i = 0; i < plan->regions.size(); ++i) {
    CHECK(plan->regions[i].name == direct->regions[i].name);
    CHECK(plan->regions[i].size == direct->regions[i].size);
  }
  CHECK(m.ForMember(0).coord.dp == 0);
  CHECK(m.ForMember(0).SameJobLayout(m));
  SlotMeta other = m;
  other.buffers[0].size += 4;
  CHECK_FALSE(other.SameJobLayout(m));
  CHECK(other.DifferenceFrom(m, "snapshot") ==
        "buffer 'w.fp32' size " + std::to_string(other.buffers[0].size) + " (snapshot: " +
            std::to_string(m.buffers[0].size) + ")");
  other = m;
  other.scheme = *Scheme::Parse("rs2");
  CHECK(other.DifferenceFrom(m) == "protection rs2 (there: arc1+aec)");
  other = m;
  other.buffers.pop_back();
  CHECK(other.DifferenceFrom(m, "snapshot") == "buffer 'opt' absent (snapshot: registered)");
}

TEST_CASE("malformed slot meta is rejected with the field named, never thrown",
          "[protect][meta]") {
  CHECK(DecodeText("").status().code() == StatusCode::kCorrupted);
  CHECK(DecodeText("{").status().code() == StatusCode::kCorrupted);
  CHECK(DecodeText("[1,2]").status().code() == StatusCode::kCorrupted);
  CHECK(DecodeText(R"({"version":"1"})").status().code() == StatusCode::kUnsupported);
  CHECK(DecodeText(R"({"version":2})").status().code() == StatusCode::kUnsupported);
  const std::string good = [] {
    const auto b = SampleMeta().Encode();
    return std::string(b.begin(), b.end());
  }();
  auto with = [&](const std::string& from, const std::string& to) {
    std::string s = good;
    const auto at = s.find(from);
    REQUIRE(at != std::string::npos);
    return DecodeText(s.replace(at, from.size(), to));
  };
  CHECK(with(R"("job":"run-7")", R"("job":7)").status().message().find("job") != std::string::npos);
  CHECK(with(R"("dp":2)", R"("dp":9)").status().message().find("outside layout") !=
        std::string::npos);
  CHECK(with(R"("kind":"unique")", R"("kind":1)").status().message().find(".kind") !=
        std::string::npos);
  CHECK(with(R"("optimizer":true)", R"("optimizer":"yes")").status().message().find(
            ".optimizer") != std::string::npos);
  CHECK(with(R"("scheme":"arc1+aec")", R"("scheme":"arc9")").status().message().find("arc9") !=
        std::string::npos);
  CHECK(with(R"("chunk":4096)", R"("chunk":0)").status().message().find("chunk") !=
        std::string::npos);
  std::string huge(kMaxSlotMetaBytes + 1, ' ');
  CHECK(DecodeText(huge).status().code() == StatusCode::kCorrupted);
}

TEST_CASE("partial sources: two writers together produce the full encoding", "[protect][meta]") {
  const Scheme arc = *Scheme::Parse("arc2");
  auto specs = testing::MixedBuffers(37);
  auto sim = testing::MakeSim(4, arc, specs, 64, reft::testing::TestSeed(11));
  const auto plan = ComputeRankPlan(JobLayout{4, 1, 1, 0}, arc, {0, 0, 1}, specs, 64);
  REQUIRE(plan.ok());
  // Writer A holds the fp32 buffer, writer B the other two; each fills what it can read.
  ReplicatedSource a, b;
  for (const auto& [name, bytes] : sim.buffers) {
    (name == "w.fp32" ? a : b)[name] = ConstSpan{bytes.data(), bytes.size()};
  }
  std::map<std::string, std::vector<uint8_t>> out;
  std::map<std::string, MutableSpan> spans;
  for (const auto& r : plan->regions) {
    out[r.name].assign(r.size, 0xEE);
    spans[r.name] = MutableSpan{out[r.name].data(), r.size};
  }
  REQUIRE(EncodeMember(sim.geometry, arc, 1, a, spans, 1, true).ok());
  REQUIRE(EncodeMember(sim.geometry, arc, 1, b, spans, 1, true).ok());
  for (const auto& [name, bytes] : sim.slots[1]) {
    INFO(name);
    CHECK(out[name] == bytes);
  }
  // Parity needs every source in one memory: a clear error, not a wrong parity.
  const Scheme aec = *Scheme::Parse("aec");
  auto g = BuildGeometry(4, specs, 64, aec);
  REQUIRE(g.ok());
  std::vector<uint8_t> parity(g->aec_sub);
  auto st = EncodeMember(*g, aec, 1, a, {{kRegionAec, MutableSpan{parity.data(), parity.size()}}},
                         1, true);
  CHECK(st.code() == StatusCode::kInvalidArgument);
  CHECK(st.message().find("not in this memory") != std::string::npos);
  CHECK_FALSE(EncodeMember(*g, aec, 1, a, {}, 1, false).ok());  // a full source is required
}

TEST_CASE("assembling the shards gives back every replicated buffer", "[protect][codec]") {
  for (int m : {1, 2, 3, 5}) {
    auto specs = testing::MixedBuffers(29 + m);
    auto sim = testing::MakeSim(m, Scheme{}, specs, 48, reft::testing::TestSeed(13) + m);
    std::vector<ConstSpan> shards;
    for (const auto& s : sim.canonical_shards) shards.push_back({s.data(), s.size()});
    std::map<std::string, std::vector<uint8_t>> out;
    std::map<std::string, MutableSpan> spans;
    for (const auto& b : specs) {
      out[b.name].assign(b.size, 0);
      spans[b.name] = {out[b.name].data(), b.size};
    }
    REQUIRE(AssembleBuffers(sim.geometry, shards, spans).ok());
    for (const auto& b : specs) {
      INFO("m=" << m << " " << b.name);
      CHECK(out[b.name] == sim.buffers[b.name]);
    }
    shards.pop_back();
    CHECK(AssembleBuffers(sim.geometry, shards, spans).code() == StatusCode::kInvalidArgument);
  }
}

}  // namespace reft::protect
