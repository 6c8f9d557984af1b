// Fuzz target: the "meta" region of a snapshot slot (protect slot_meta.h,
// SlotMeta::Decode). A replacement node, restore-check and the persistent tier read it from
// slots written by other nodes and processes, so it is untrusted input; whatever it accepts
// drives the sharding function (slot layouts, shard boundaries, buffer placement).
//
// The input is the region's bytes (JSON). Properties of an accepted meta:
//  - it round-trips: Decode(Encode(m)) succeeds, describes the same job, layout, scheme,
//    alignment and buffers (SameJobLayout) and the same coordinates, and re-encodes identically;
//  - the rank's plan and the SG geometry can be computed (Decode validated them), and the
//    geometry is what sharding.h describes: shards partition [0, S) in order, where S is the
//    sum of the replicated buffer sizes (no wrap-around), and the buffers tile [0, S);
//  - every member of the SG (ForMember) has a plan, whose shard is the geometry's shard and
//    whose pieces lie inside both the shard and their buffers.
// A refused meta must fail with InvalidArgument, Corrupted or Unsupported and a message.
#include <algorithm>
#include <string>

#include "fuzz_util.h"
#include "reft/protect/slot_meta.h"

using namespace reft;
using namespace reft::protect;
using reft::fuzz::Bytes;

namespace {

void CheckPlan(const SlotMeta& m, const SgGeometry& g, int d) {
  SlotMeta member = m.ForMember(d);
  auto plan = member.Plan();
  FUZZ_CHECK(plan.ok(), "member %d of an accepted meta has no plan: %s", d,
             plan.status().ToString().c_str());
  FUZZ_CHECK(plan->shard_begin == g.shard_begin[d] && plan->shard_end == g.shard_begin[d + 1],
             "member %d: plan shard differs from the geometry", d);
  uint64_t covered = 0;
  for (const auto& piece : plan->pieces) {
    const BufferExtent* b = nullptr;
    for (const auto& e : g.buffers) {
      if (e.name == piece.buffer) b = &e;
    }
    FUZZ_CHECK(b != nullptr, "member %d: piece of unknown buffer '%s'", d, piece.buffer.c_str());
    FUZZ_CHECK(piece.buffer_offset <= b->size && piece.size <= b->size - piece.buffer_offset,
               "member %d: piece outside buffer '%s'", d, piece.buffer.c_str());
    FUZZ_CHECK(piece.shard_offset == covered, "member %d: pieces do not tile the shard", d);
    covered += piece.size;
  }
  FUZZ_CHECK(covered == plan->shard_end - plan->shard_begin, "member %d: pieces cover %lu of %lu",
             d, (unsigned long)covered, (unsigned long)(plan->shard_end - plan->shard_begin));
}

void WriteSeeds(const reft::fuzz::SeedSink& sink) {
  auto put = [&](const std::string& name, const SlotMeta& m) {
    FUZZ_CHECK(SlotMeta::Decode(m.Encode().data(), m.Encode().size()).ok(), "seed %s invalid",
               name.c_str());
    sink(name, m.Encode());
  };
  SlotMeta m;
  m.job = "run-1";
  m.coord = {0, 0, 1};
  m.layout.dp = 4;
  m.scheme = *Scheme::Parse("arc1+aec");
  m.buffers = {{"params", 1 << 20, "fp32", BufferKind::kReplicated, -1, false},
               {"embed", 4096 * 3, "bf16", BufferKind::kReplicated, 0, false},
               {"rng", 16, "uint8", BufferKind::kUnique, -1, false}};
  put("arc1_aec_dp4", m);
  SlotMeta z = m;
  z.layout = JobLayout{};
  z.layout.dp = 3;
  z.layout.tp = 2;
  z.layout.pp = 2;
  z.layout.zero = 1;
  z.coord = {1, 1, 2};
  z.scheme = *Scheme::Parse("rs1+aor");
  z.shard_chunk = 4096;
  z.buffers.push_back({"exp_avg", 8192, "fp32", BufferKind::kUnique, -1, true});
  put("rs1_aor_zero1", z);
  SlotMeta one;
  one.job = "solo";
  one.scheme = *Scheme::Parse("none");
  one.buffers = {{"w", 10, "int8", BufferKind::kReplicated, 2, false}};
  put("single_rank", one);
  SlotMeta empty = m;
  empty.buffers.clear();
  put("no_buffers", empty);
  // Sizes written as strings, and a meta from a newer version (refused as Unsupported).
  const std::string sizes =
      R"({"version":1,"job":"j","rank":{"pp":0,"tp":0,"dp":0},"layout":{"dp":2,"tp":1,"pp":1,)"
      R"("zero_stage":0},"scheme":"arc1","chunk":65536,"buffers":[{"name":"p","size":"1M",)"
      R"("dtype":"fp16","kind":"replicated","layer":-1,"optimizer":false}]})";
  sink("size_strings", Bytes(sizes.begin(), sizes.end()));
  const std::string v2 = R"({"version":2,"job":"j"})";
  sink("version2", Bytes(v2.begin(), v2.end()));
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  reft::fuzz::MaybeWriteSeeds(WriteSeeds);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto meta = SlotMeta::Decode(data, size);
  if (!meta.ok()) {
    const StatusCode c = meta.status().code();
    FUZZ_CHECK(c == StatusCode::kInvalidArgument || c == StatusCode::kCorrupted ||
                   c == StatusCode::kUnsupported,
               "Decode failed with %s", meta.status().ToString().c_str());
    FUZZ_CHECK(!meta.status().message().empty(), "refusal without a message");
    return 0;
  }
  const SlotMeta& m = *meta;
  const Bytes e1 = m.Encode();
  auto again = SlotMeta::Decode(e1.data(), e1.size());
  FUZZ_CHECK(again.ok(), "re-encoded meta does not decode: %s", again.status().ToString().c_str());
  FUZZ_CHECK(again->SameJobLayout(m) && again->coord == m.coord, "round trip changed the meta");
  FUZZ_CHECK(again->Encode() == e1, "encode(decode(encode(m))) != encode(m)");

  auto plan = m.Plan();
  FUZZ_CHECK(plan.ok(), "accepted meta has no plan: %s", plan.status().ToString().c_str());
  auto geometry = m.Geometry();
  FUZZ_CHECK(geometry.ok(), "accepted meta has no geometry: %s",
             geometry.status().ToString().c_str());
  const SgGeometry& g = *geometry;
  FUZZ_CHECK(g.m == m.layout.dp && g.shard_begin.size() == static_cast<size_t>(g.m) + 1,
             "geometry of %d members has %zu boundaries", g.m, g.shard_begin.size());
  // Flattened replicated bytes: S = sum of their sizes, computed without wrap-around.
  unsigned __int128 total = 0;
  for (const auto& b : m.buffers) {
    if (b.kind == BufferKind::kReplicated) total += b.size;
  }
  FUZZ_CHECK(total == g.total, "S = %lu but the replicated buffers hold %.0f bytes",
             (unsigned long)g.total, static_cast<double>(total));
  uint64_t at = 0;
  for (const auto& b : g.buffers) {
    FUZZ_CHECK(b.offset == at, "buffer '%s' not at the end of the previous one", b.name.c_str());
    at += b.size;
  }
  FUZZ_CHECK(g.shard_begin.front() == 0 && g.shard_begin.back() == g.total,
             "shards cover [%lu, %lu) of [0, %lu)", (unsigned long)g.shard_begin.front(),
             (unsigned long)g.shard_begin.back(), (unsigned long)g.total);
  for (int d = 0; d < g.m; ++d) {
    FUZZ_CHECK(g.shard_begin[d] <= g.shard_begin[d + 1], "shard %d ends before it begins", d);
  }
  // Members: first, last, this one (all of them for small groups).
  if (g.m <= 8) {
    for (int d = 0; d < g.m; ++d) CheckPlan(m, g, d);
  } else {
    CheckPlan(m, g, 0);
    CheckPlan(m, g, g.m - 1);
    CheckPlan(m, g, m.coord.dp);
  }
  return 0;
}
