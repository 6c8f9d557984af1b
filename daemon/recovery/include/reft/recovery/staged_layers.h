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
/// The staged bytes are a cache of one committed step, verified when they were fetched: losing
/// them loses nothing (the restore reads the holders). They are keyed by the timeline stamp of
/// the commit they cache (coord::TimelineStamp: the generation, restore epoch and layout
/// revision step S was committed in; coord::JobGeneration::committed_in), and served only to a
/// restore of that same commit: after a fall-back to the tier, generation g+1's step X is
/// another state than generation g's step X, and a job released and started again under the
/// same name commits its own step X under another stamp. The trainers' restart that the plan
/// asks for (a new layout, a new restore decision) does not commit anything, so it leaves the
/// stamp of step S as it was: the layers staged for it are served. They are dropped when the
/// job commits a newer step here or moves to another timeline (any other stamp for the job),
/// when a staging that ends after such a move would keep them, and `grace` after they were last
/// staged or served (a node that never sees the job commit again: its ranks went elsewhere).
/// Thread-safe.

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "reft/coord/timeline.h"
#include "reft/mapped_memfd.h"
#include "reft/mutex.h"
#include "reft/recovery/reshape.h"
#include "reft/thread.h"

namespace reft::recovery {

/// \brief Where one staged buffer's bytes lie in its layer's memory: bytes [begin, end) of the
/// saved (global) buffer `name` as a rank at tensor index `tp` reads it.
struct StagedBuffer {
  std::string name;
  int tp = 0;
  uint64_t begin = 0, end = 0;
  uint64_t offset = 0;  ///< into the layer's memory
};

struct StagedLayersOptions {
  using Clock = std::chrono::steady_clock;
  /// A job's staged layers are dropped once they were neither staged nor served for this long
  /// (docs/planner.md "Executing the transfer plan": the trainers restart right after the plan
  /// ran; a node whose new ranks never come keeps nothing past it).
  std::chrono::milliseconds grace{std::chrono::minutes(15)};
  /// Drop them at the grace time from a thread of their own (`reft-staged`); false: only when
  /// DropIdle is called (tests, with their own `now`).
  bool expire_in_background = true;
  /// The clock the grace time is measured on (tests: a fake one).
  std::function<Clock::time_point()> now = [] { return Clock::now(); };
};

class StagedLayers {
 public:
  using Clock = StagedLayersOptions::Clock;
  using Stamp = coord::TimelineStamp;

  explicit StagedLayers(StagedLayersOptions options = {});
  ~StagedLayers();
  StagedLayers(const StagedLayers&) = delete;
  StagedLayers& operator=(const StagedLayers&) = delete;

  /// \brief The bytes of `layer` of the commit of `step` of `job` stamped `stamp` staged here (its
  /// buffers' ranges), nullopt when it is not.
  std::optional<uint64_t> Staged(const std::string& job, const Stamp& stamp, int64_t step,
                                 int layer) const;

  /// \brief Keeps `memory` (verified bytes of `layer` laid out as `buffers` say) for a reshaped
  /// restore of the commit of `step` stamped `stamp`; the job's layers of older steps and of
  /// other stamps are dropped. False, keeping nothing, when the job moved on while the layer was
  /// being fetched: `stamp` is older than the timeline this node last dropped the job's layers
  /// for (DropOtherTimelines, DropOtherGenerations).
  bool Put(const std::string& job, const Stamp& stamp, int64_t step, int layer,
           MappedMemfd memory, std::vector<StagedBuffer> buffers);

  /// \brief Copies the bytes of the requests that staged layers of the commit of `step` stamped
  /// `stamp` cover to their destinations; returns what is left (whole requests, or the gaps
  /// between staged pieces: bytes the node holds itself, to be assembled) and adds the bytes
  /// copied to `*served`. Requests for per-rank buffers (pp >= 0) are never served from here.
  std::vector<RangeRequest> Serve(const std::string& job, const Stamp& stamp, int64_t step,
                                  const std::vector<RangeRequest>& requests,
                                  uint64_t* served);

  /// \brief Drops the job's staged layers of steps before `step` (the job committed `step`).
  void DropBefore(const std::string& job, int64_t step);
  /// \brief Drops the job's staged layers of every stamp but `stamp`: the timeline in force,
  /// as a staging reads it when it starts (whatever came before: a job released and started
  /// again under its name starts its stamps over).
  void DropOtherTimelines(const std::string& job, const Stamp& stamp);
  /// \brief Drops the job's staged layers of every generation but `generation` (a fall-back).
  void DropOtherGenerations(const std::string& job, uint64_t generation);
  /// \brief Drops the layers of every job neither staged nor served since `now - grace`, and
  /// forgets such jobs; returns the bytes dropped.
  uint64_t DropIdle(Clock::time_point now);

  /// Bytes staged here, all jobs.
  uint64_t bytes() const;

 private:
  struct Layer {
    MappedMemfd memory;
    std::vector<StagedBuffer> buffers;
  };
  using Key = std::tuple<std::string, int64_t, Stamp, int>;  // job, step, stamp, layer
  /// What is known of a job here: the timeline in force when its layers were last dropped for
  /// one or staged (none yet: any), and when its layers were last staged or served.
  struct Job {
    std::optional<Stamp> current;
    Clock::time_point last_used{};
  };

  /// The first key of `job` in `layers_`.
  static Key Begin(const std::string& job);
  /// The job's entry, used now.
  Job& TouchLocked(const std::string& job) REFT_REQUIRES(mu_);
  /// Drops the job's layers for which `drop(key)` holds.
  template <typename Pred>
  void DropIfLocked(const std::string& job, Pred drop) REFT_REQUIRES(mu_);
  void DropIdleLocked(Clock::time_point now, uint64_t* dropped) REFT_REQUIRES(mu_);
  /// When the next job becomes idle, if any does.
  std::optional<Clock::time_point> NextExpiryLocked() const REFT_REQUIRES(mu_);
  void ExpireLoop();

  const StagedLayersOptions options_;
  mutable Mutex mu_;
  std::condition_variable cv_;  // a job staged while the expiry thread had nothing to wait for
  // shared_ptr: Serve copies from a layer outside the lock while DropBefore may forget it.
  std::map<Key, std::shared_ptr<const Layer>> layers_ REFT_GUARDED_BY(mu_);
  std::map<std::string, Job> jobs_ REFT_GUARDED_BY(mu_);
  uint64_t bytes_ REFT_GUARDED_BY(mu_) = 0;
  bool stop_ REFT_GUARDED_BY(mu_) = false;
  bool touched_ REFT_GUARDED_BY(mu_) = false;  // a job used since the expiry thread last looked
  Thread expiry_;
};

}  // namespace reft::recovery
