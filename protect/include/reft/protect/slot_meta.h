#pragma once
/// \file slot_meta.h
/// \brief The "meta" region every snapshot slot starts with: what the slot's other regions mean.
///
/// It holds the inputs of the sharding function for one rank (job, coordinates, layout, scheme,
/// shard alignment, every registered buffer), so that a daemon holding nothing of a job (a
/// replacement node, `reftctl restore-check`, the persistent tier) recomputes the rank's plan
/// and its sharding group's geometry from any member's slot. Encoded as JSON (the sharding
/// input format of json_io.h plus "job" and "rank"); decoding treats it as untrusted input.

#include <cstdint>
#include <string>
#include <vector>

#include "reft/protect/buffer_spec.h"
#include "reft/protect/scheme.h"
#include "reft/protect/sharding.h"
#include "reft/result.h"

namespace reft::protect {

inline constexpr const char* kRegionMeta = "meta";
inline constexpr uint64_t kMaxSlotMetaBytes = 1 << 20;

struct SlotMeta {
  std::string job;
  RankCoord coord;
  JobLayout layout;
  Scheme scheme;
  uint64_t shard_chunk = 64 << 10;  ///< shard alignment of the sharding function
  std::vector<BufferSpec> buffers;  ///< in registration order

  std::vector<uint8_t> Encode() const;
  /// \brief Parses and validates (layout, coordinates inside it, buffers); InvalidArgument or
  /// Corrupted naming the field.
  static Result<SlotMeta> Decode(const uint8_t* data, uint64_t size);

  /// \brief The rank's plan (ComputeRankPlan): its slot regions after "meta", its shard.
  Result<RankPlan> Plan() const;
  /// \brief Geometry of the rank's sharding group (identical for every member).
  Result<SgGeometry> Geometry() const;
  /// \brief The meta of SG member `dp` (same job, layout, scheme and buffers).
  SlotMeta ForMember(int dp) const;
  /// \brief True when `o` describes the same job, layout, scheme, alignment and buffers (the
  /// coordinates may differ): members of one SG must agree on all of it.
  bool SameJobLayout(const SlotMeta& o) const { return DifferenceFrom(o).empty(); }
  /// \brief "" when SameJobLayout, else every difference in words, `o`'s side named
  /// `other_name`, e.g. "layout dp 4 (snapshot: 2); buffer 'w' size 100 (snapshot: 96)".
  std::string DifferenceFrom(const SlotMeta& o, const std::string& other_name = "there") const;
};

}  // namespace reft::protect
