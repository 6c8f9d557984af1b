#pragma once
/// \file reshape.h
/// \brief Reshape (docs/recovery.md "Reshape"): bytes of a committed step found by the global
/// names of its buffers, whatever layout saved them.
///
/// Two layers, so that a planner-driven transfer (move a layer's buffers to the node that will
/// host it before the trainers restart) reuses the same code as a reshaped restore:
/// - CatalogStep: what step S holds, by name — one entry per saved sharding group (its snapshot
///   meta and geometry), every buffer with its kind, dtype, size, layer, shard and group.
/// - AssembleRanges: fills "bytes [begin, end) of buffer X of step S" requests from wherever the
///   bytes are: this node's slots, peers' slots over gRPC, redundancy decoded (ARC, AEC, RS by
///   AssembleGroup), every piece verified against the sealed checksums by the fetcher.
/// - ReshapeRank: the state of one rank of a new layout (its registered buffers) assembled with
///   both, laid out like any restored state (state_layout.h).

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "reft/job_layout.h"
#include "reft/local/recovery_hooks.h"
#include "reft/protect/slot_meta.h"
#include "reft/recovery/cluster_view.h"
#include "reft/recovery/fetcher.h"
#include "reft/recovery/region_reader.h"
#include "reft/recovery/restore_stats.h"
#include "reft/recovery/snapshot_meta.h"

namespace reft::recovery {

/// \brief One sharding group of the saved layout.
struct SavedGroup {
  int pp = 0;
  int tp = 0;
  LocatedMeta meta;  ///< a member's snapshot meta (ForMember(d) gives member d's)
  protect::SgGeometry geometry;
};

/// \brief One saved buffer name: its spec (as member dp0 registered it) and its group.
struct SavedBuffer {
  size_t group = 0;  ///< index into StepCatalog::groups
  protect::BufferSpec spec;
};

/// \brief What a committed step holds, by global name.
struct StepCatalog {
  std::string job;
  int64_t step = -1;
  JobLayout layout;  ///< the layout the step was saved under
  std::string scheme;
  std::vector<SavedGroup> groups;
  /// Every name with every group that saved it (a replicated name saved by several pipeline
  /// stages or tensor ranks; CatalogStep checks that their sizes and dtypes agree).
  std::map<std::string, std::vector<SavedBuffer>> buffers;

  /// \brief The saved buffer `name` for a rank at tensor-parallel index `tp` (the group with
  /// that tp when the saved layout has it, else the only one); `pp` >= 0 asks for the group at
  /// exactly (pp, tp) (per-rank buffers). NotFound naming the step and the rule that names
  /// must not depend on the layout.
  Result<const SavedBuffer*> Find(const std::string& name, int tp, int pp = -1) const;
};

/// \brief Adds saved group `g` (its meta and geometry set) to `catalog`, indexing its buffers;
/// InvalidArgument when it saved a replicated name with another size or dtype than a group at
/// the same tp already did (a name must mean one tensor).
Status AddGroup(StepCatalog* catalog, SavedGroup g);

/// \brief Reads the snapshot meta of every saved sharding group of `step` (slots located in
/// `view`). Lost naming the group when no member's meta can be read (the group's slots are all
/// gone); InvalidArgument when two groups saved one replicated name with different sizes or
/// dtypes (a name must mean one tensor).
Result<StepCatalog> CatalogStep(const ClusterView& view, const std::string& job, int64_t step,
                                const RegionReader& reader,
                                std::chrono::steady_clock::time_point deadline);

/// \brief Bytes [begin, end) of saved buffer `name` into `dst` (end - begin bytes). For a
/// sharded buffer the range is of the global buffer (0..shard_total) and is gathered from the
/// parts that overlap it. A unique buffer without a shard is per rank: `dp` names the saved
/// member and `pp` its stage (-1 for replicated and sharded buffers). `tp` (and `pp`) select
/// the group like StepCatalog::Find.
struct RangeRequest {
  std::string name;
  uint64_t begin = 0;
  uint64_t end = 0;
  uint8_t* dst = nullptr;
  int tp = 0;
  int pp = -1;
  int dp = -1;
};

/// \brief The part of saved member `dp` that a range of a sharded buffer overlaps: bytes
/// [lo, hi) of its buffer, landing at `at` bytes into the request's destination.
struct PartOverlap {
  int dp = 0;
  uint64_t lo = 0, hi = 0;
  uint64_t at = 0;
};

/// \brief The saved parts global range [begin, end) of sharded buffer `spec` overlaps: member d
/// of `members` held [d·size, min((d+1)·size, shard_total)).
std::vector<PartOverlap> OverlappingParts(const protect::BufferSpec& spec, int members,
                                          uint64_t begin, uint64_t end);

/// \brief Byte ranges [first, second) of saved buffer `name` (replicated or sharded, at tensor
/// index `tp`) that no slot on this node holds, neither as its own part nor as a copy of
/// another member's: what this node must fetch to serve the whole buffer locally. Sorted and
/// disjoint; empty when the node holds all of it.
using ByteRanges = std::vector<std::pair<uint64_t, uint64_t>>;
Result<ByteRanges> RangesNotHeldHere(const StepCatalog& catalog, const ClusterView& view,
                                     const std::string& name, int tp);

/// \brief Fills every request. Replicated bytes come from their group's canonical vector,
/// assembled in place when the requests of a group lay it out exactly (the common case of a
/// dp change), else into a scratch memfd. `detail` (optional) gets where each group's parts
/// came from. Lost naming what cannot be rebuilt; InvalidArgument for a range outside the
/// saved buffer; Timeout past `deadline`.
Status AssembleRanges(const StepCatalog& catalog, const ClusterView& view, Fetcher* fetcher,
                      const std::vector<RangeRequest>& requests, RestoreStats* stats,
                      std::chrono::steady_clock::time_point deadline,
                      std::string* detail = nullptr);

/// \brief Fills range requests from one source of the saved step's bytes (memory:
/// AssembleRanges; the persistent tier: AssembleTierRanges), setting `*detail`.
using RangeAssembler =
    std::function<Status(const std::vector<RangeRequest>& requests, std::string* detail)>;

/// \brief The state of the rank `meta` describes (a rank of a new layout) from the saved step:
/// every replicated buffer by name, every sharded buffer's range from the overlapping saved
/// parts, unique buffers without a shard only at the same (pp, tp, dp) (else listed as
/// untouched), the bytes from `assemble`. A buffer `request.remap` names is filled from the
/// listed ranges of the saved (replicated or sharded) buffer of its name instead, the rest of
/// it zero (RemapRanges). InvalidArgument when a needed name is missing or its size/dtype/shard
/// total differs from the saved one; Busy when the remap was computed for another saved layout
/// than the step's. `source` is not set.
Result<local::RestoredState> ReshapeRank(const protect::SlotMeta& meta, const StepCatalog& catalog,
                                         const RangeAssembler& assemble,
                                         const local::RestoreRequest& request = {});

/// \brief The ranges `request.reads` names (RestoreRequest::reads) from the saved step, one
/// after another in the state's memfd, the bytes from `assemble`. Busy when the catalog's step
/// is not `request.read_step`; NotFound for a name or group the step lacks; InvalidArgument for
/// a per-rank buffer (unique without a shard) or a range outside the saved buffer.
Result<local::RestoredState> ReadSavedRanges(const StepCatalog& catalog,
                                             const RangeAssembler& assemble,
                                             const local::RestoreRequest& request);

/// \brief The range requests that fill registered buffer `want` (its bytes at `dst`) from the
/// `segments` of saved buffer `saved`: sorted by destination, adjacent ones merged. Invalid-
/// Argument naming the segment when one leaves either buffer or two overlap in `want`, or when
/// the saved buffer is per rank (unique without a shard) or of another dtype.
Result<std::vector<RangeRequest>> RemapRanges(
    const protect::BufferSpec& want, const SavedBuffer& saved,
    std::vector<local::RestoreRequest::Segment> segments, int tp, uint8_t* dst);

}  // namespace reft::recovery
