/// RemapRanges: a registered buffer filled from scattered ranges of a saved global buffer
/// (RestoreRequest::remap, docs/recovery.md "Reshape").

#include <catch2/catch.hpp>

#include "reft/recovery/reshape.h"

using reft::StatusCode;
using reft::local::RestoreRequest;
using reft::protect::BufferKind;
using reft::protect::BufferSpec;
using reft::recovery::RemapRanges;
using reft::recovery::SavedBuffer;

namespace {

BufferSpec Registered(uint64_t size) {
  BufferSpec b;
  b.name = "optim/float32/cpu";
  b.size = size;
  b.dtype = "float32";
  b.kind = BufferKind::kUnique;
  b.shard_offset = 0;
  b.shard_total = 3 * size;
  return b;
}

SavedBuffer SavedSharded(uint64_t part, int members) {
  SavedBuffer s;
  s.spec = Registered(part);
  s.spec.shard_total = part * members;
  return s;
}

}  // namespace

TEST_CASE("remap segments become range requests, sorted by destination, adjacent ones merged") {
  uint8_t dst[64];
  const SavedBuffer saved = SavedSharded(48, 4);  // a global buffer of 192 bytes
  auto r = RemapRanges(Registered(64), saved,
                       {{100, 40, 8}, {0, 0, 16}, {16, 16, 8}, {150, 24, 16}}, 0, dst);
  REQUIRE(r.ok());
  REQUIRE(r->size() == 3);  // [0,16)+[16,24) are contiguous on both sides
  CHECK(((*r)[0].begin == 0 && (*r)[0].end == 24 && (*r)[0].dst == dst));
  CHECK(((*r)[1].begin == 150 && (*r)[1].end == 166 && (*r)[1].dst == dst + 24));
  CHECK(((*r)[2].begin == 100 && (*r)[2].end == 108 && (*r)[2].dst == dst + 40));
  for (const auto& q : *r) CHECK(q.name == "optim/float32/cpu");
  // Contiguous in the destination only: two requests.
  r = RemapRanges(Registered(64), saved, {{0, 0, 8}, {80, 8, 8}}, 0, dst);
  REQUIRE(r.ok());
  CHECK(r->size() == 2);
  // Zero-length segments are nothing; no segment at all is a zero-filled buffer.
  r = RemapRanges(Registered(64), saved, {{0, 0, 0}}, 0, dst);
  REQUIRE(r.ok());
  CHECK(r->empty());
}

TEST_CASE("a remap segment outside either buffer, or overlapping another, is refused by name") {
  uint8_t dst[64];
  const SavedBuffer saved = SavedSharded(48, 4);
  auto code = [&](std::vector<RestoreRequest::Segment> segments) {
    auto r = RemapRanges(Registered(64), saved, std::move(segments), 0, dst);
    if (!r.ok()) CHECK(r.status().message().find("optim/float32/cpu") != std::string::npos);
    return r.status().code();
  };
  CHECK(code({{0, 60, 8}}) == StatusCode::kInvalidArgument);              // past the registered
  CHECK(code({{188, 0, 8}}) == StatusCode::kInvalidArgument);             // past the saved total
  CHECK(code({{0, 8, UINT64_MAX - 4}}) == StatusCode::kInvalidArgument);  // wraps around
  CHECK(code({{UINT64_MAX - 2, 0, 8}}) == StatusCode::kInvalidArgument);
  CHECK(code({{0, 0, 16}, {40, 8, 8}}) == StatusCode::kInvalidArgument);  // overlap in dst
  CHECK(code({{0, 0, 16}, {40, 16, 8}}) == StatusCode::kOk);              // touching is fine
}

TEST_CASE("a remap needs a saved buffer with global ranges and the same dtype") {
  uint8_t dst[64];
  SavedBuffer per_rank;
  per_rank.spec = Registered(64);
  per_rank.spec.shard_total = 0;  // unique without a shard: per rank
  auto r = RemapRanges(Registered(64), per_rank, {{0, 0, 8}}, 0, dst);
  CHECK(r.status().code() == StatusCode::kInvalidArgument);
  CHECK(r.status().message().find("per rank") != std::string::npos);

  SavedBuffer replicated;
  replicated.spec = Registered(64);
  replicated.spec.kind = BufferKind::kReplicated;
  replicated.spec.shard_total = 0;
  CHECK(RemapRanges(Registered(64), replicated, {{0, 0, 64}}, 0, dst).ok());
  replicated.spec.dtype = "bfloat16";
  r = RemapRanges(Registered(64), replicated, {{0, 0, 64}}, 0, dst);
  CHECK(r.status().code() == StatusCode::kInvalidArgument);
  CHECK(r.status().message().find("bfloat16") != std::string::npos);
}
