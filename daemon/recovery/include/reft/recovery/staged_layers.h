#pragma once
/// \file staged_layers.h
/// \brief Layers of a committed step staged on the node that will host them after a
/// reconfiguration (docs/planner.md "Executing the transfer plan").
///
/// After a decision that restarts the job in a new layout, every node of that layout pulls the
/// bytes of the layers it will host that no slot of its own holds (of every replicated buffer
/// and every sharded buffer registered with the layer: whole layers a Kuhn–Munkres move brings,
/// and the other members' shards of the layers it kept) before the trainers restart; a
/// reshaped restore on the node then takes them from here and the rest from its own slots,
/// instead of from the holders. A node that will run an old stage whole again also stages that
/// stage's buffers without a layer (its new ranks register them under the same names). Buffers saved per rank (unique without a shard) are not
/// staged: a reshape gives them only to the rank with the same coordinates, which reads its own.
///
/// The staged bytes are a cache of a committed step, verified when they were fetched: losing
/// them loses nothing (the restore reads the holders), and they are dropped as soon as the job
/// commits a newer step or moves to another generation. They belong to the job generation they
/// were staged in and are served only in it: after a fall-back to the tier, generation g+1's
/// step X is another state than generation g's step X. Thread-safe.

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "reft/mapped_memfd.h"
#include "reft/mutex.h"
#include "reft/recovery/reshape.h"

namespace reft::recovery {

/// \brief Where one staged buffer's bytes lie in its layer's memory: bytes [begin, end) of the
/// saved (global) buffer `name` as a rank at tensor index `tp` reads it.
struct StagedBuffer {
  std::string name;
  int tp = 0;
  uint64_t begin = 0, end = 0;
  uint64_t offset = 0;  ///< into the layer's memory
};

class StagedLayers {
 public:
  /// \brief The bytes of `layer` of step `step` of `job` in `generation` staged here (its
  /// buffers' ranges), nullopt when it is not.
  std::optional<uint64_t> Staged(const std::string& job, uint64_t generation, int64_t step, int layer) const;

  /// \brief Keeps `memory` (verified bytes of `layer` laid out as `buffers` say) for a reshaped
  /// restore of `step` in `generation`. Staged layers of older steps of the job, and of other
  /// generations, are dropped.
  void Put(const std::string& job, uint64_t generation, int64_t step, int layer, MappedMemfd memory,
           std::vector<StagedBuffer> buffers);

  /// \brief Copies the bytes of the requests that staged layers of (`job`, `generation`, `step`) cover to
  /// their destinations; returns what is left (whole requests, or the gaps between staged
  /// pieces: bytes the node holds itself, to be assembled) and adds the bytes copied to
  /// `*served`. Requests for per-rank buffers (pp >= 0) are never served from here.
  std::vector<RangeRequest> Serve(const std::string& job, uint64_t generation, int64_t step,
                                  const std::vector<RangeRequest>& requests,
                                  uint64_t* served) const;

  /// \brief Drops the job's staged layers of steps before `step` (the job committed `step`).
  void DropBefore(const std::string& job, int64_t step);
  /// \brief Drops the job's staged layers of every generation but `generation`.
  void DropOtherGenerations(const std::string& job, uint64_t generation);

  /// Bytes staged here, all jobs.
  uint64_t bytes() const;

 private:
  struct Layer {
    MappedMemfd memory;
    std::vector<StagedBuffer> buffers;
  };
  using Key = std::tuple<std::string, int64_t, uint64_t, int>;  // job, step, generation, layer

  mutable Mutex mu_;
  // shared_ptr: Serve copies from a layer outside the lock while DropBefore may forget it.
  std::map<Key, std::shared_ptr<const Layer>> layers_ REFT_GUARDED_BY(mu_);
  uint64_t bytes_ REFT_GUARDED_BY(mu_) = 0;
};

}  // namespace reft::recovery
