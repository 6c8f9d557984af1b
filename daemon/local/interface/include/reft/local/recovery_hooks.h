#pragma once
/// \file recovery_hooks.h
/// \brief What the local channel needs from the cluster layer, as interfaces (the dependency
/// points from daemon/recovery to daemon/local, never back; reftd wires the implementations).
///
/// - PeerCopier: a session completing step s of rank dp copies the unique buffers of rank
///   dp+1 (its ring neighbour in the sharding group) into its own slot ("peer/<name>" regions,
///   docs/architecture.md "Glossary": peer copy), from the neighbour's published "unique/<name>" regions.
/// - RestoreProvider: REFT-load for one rank (docs/data-paths.md "Restore"): the newest step committed
///   job-wide, assembled from this node's slots, peers' slots, replicas, parity or RS, or the
///   persistent tier; and the rank's own slot regenerated when this node had lost it.

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "reft/unique_fd.h"
#include "reft/protect/slot_meta.h"
#include "reft/result.h"
#include "reft/store/snapshot_store.h"

namespace reft::local {

class PeerCopier {
 public:
  virtual ~PeerCopier() = default;
  /// \brief Copies `region` of rank `from`'s slot of `step` into [dst, dst+size) once the
  /// owner published it (SnapshotStore::Publish), wherever that rank lives (this node or a
  /// peer), verifying checksums. Waits up to `timeout` for the publication: Timeout when it
  /// does not come (the neighbour is slow or gone; the step then fails on this rank and is
  /// never committed). InvalidArgument when the region's size differs from `size`.
  /// `abandon` (optional) is asked between attempts: a non-OK answer ends the wait with it at
  /// once (the copying rank's trainer went away, or the job was restored again without it).
  virtual Status CopyPublished(const store::RankKey& from, int64_t step, const std::string& region,
                               uint8_t* dst, uint64_t size, std::chrono::milliseconds timeout,
                               const std::function<Status()>& abandon = {}) = 0;
};

/// One phase of the recovery a restore ended (docs/recovery.md "Phases of a recovery"): its
/// name ("lost_at", ..., "restore_ended_at"), when (unix ms) and the node that observed it.
struct RestorePhaseTime {
  std::string phase;
  int64_t at_ms = 0;
  std::string node;
};

/// \brief The full bytes of every buffer of one rank at one step, in a memfd the daemon maps
/// (device restores copy H2D from it) and hands to the trainer (staged restores map it).
struct RestoredState {
  int64_t step = -1;            ///< -1: nothing to restore (no committed step anywhere)
  std::string source;           ///< "memory" or "tier" (the persistent tier)
  std::string detail;           ///< one line for logs: where each part came from
  /// Time spent reaching the job-wide decision, and why it waited / whose decision it followed.
  std::chrono::nanoseconds agreement{0};
  std::string agreement_detail;
  std::chrono::nanoseconds elapsed{0};  ///< the whole restore in reftd
  /// The restore epoch of the decision this restore followed (CommitCoordinator::RestoreEpoch):
  /// the session's snapshots count only while the job is still in it.
  int64_t epoch = 0;
  UniqueFd fd;     ///< memfd of `size` bytes; invalid when `streamed`
  uint64_t size = 0;
  bool streamed = false;  ///< every byte went through RestoreRequest::sink
  std::map<std::string, uint64_t> offsets;  ///< buffer name -> offset of its bytes in `fd`
  /// Reshape (RestoreRequest::reshape): the step was saved under `from_layout` and assembled
  /// by global name. `untouched` buffers have no bytes in `fd` (unique buffers without a shard
  /// whose coordinates the saved layout lacks): the trainer keeps its own.
  bool reshaped = false;
  std::string from_layout;
  std::vector<std::string> filled;
  std::vector<std::string> untouched;
  /// The phases of the recovery, those that happened (set by reftd's restore wiring).
  std::vector<RestorePhaseTime> phases;
};

/// \brief Streamed delivery of a restore: verified bytes of the rank's state go to the trainer
/// as they arrive, into memory it already has, instead of into a new memfd (whose first touch,
/// page by page, costs more than moving the bytes). Offsets are those of the state layout a
/// memfd would have had (RestoredState::offsets).
class RestoreSink {
 public:
  virtual ~RestoreSink() = default;
  /// \brief False once Begin was called: a restore that retries (a newer decision) delivers its
  /// second attempt in a memfd, which overwrites whatever the first one streamed.
  virtual bool Available() const = 0;
  /// \brief Opens the stream for a state of `size` bytes laid out as `offsets` (buffer name ->
  /// offset). Called at most once, before any Write. `piece_bytes` is the largest piece the
  /// restore reads at once and `in_flight` how many it reads at the same time (what Borrow is
  /// asked for).
  virtual Status Begin(const std::map<std::string, uint64_t>& offsets, uint64_t size,
                       uint64_t piece_bytes, int in_flight) = 0;
  /// \brief Memory to read a piece of `size` bytes into, which Write() then hands on without
  /// copying it (the ring the trainer copies out of); waits for some to be free. nullptr when
  /// the sink has none that large: the caller reads into its own memory and Write copies.
  /// Thread-safe. An error means the trainer cannot take more.
  virtual Result<uint8_t*> Borrow(uint64_t /*size*/) { return nullptr; }
  /// \brief Gives back what Borrow returned, written or not; called once per Borrow.
  virtual void GiveBack(uint8_t* /*memory*/) {}
  /// \brief Bytes [offset, offset+size) of the state, verified. Thread-safe; records never
  /// overlap. `data` may be borrowed memory (then handed on as it is) or the caller's own.
  /// An error means the trainer cannot take more (gone, or stopped reading).
  virtual Status Write(uint64_t offset, const uint8_t* data, uint64_t size) = 0;
  /// \brief Closes the stream. `complete`: every byte was written (RestoredState::streamed);
  /// otherwise the provider goes on without it and delivers the whole state in a memfd.
  virtual void End(bool complete) = 0;
};

/// \brief What the trainer asks of a restore.
struct RestoreRequest {
  /// Restore a step saved under another layout (other dp, pp split, ZeRO partition) by the
  /// buffers' global names (docs/recovery.md "Reshape"). Without it a layout change is an
  /// InvalidArgument naming both layouts.
  bool reshape = false;
  /// Take the job-wide decision and say which step it chose and the layout that step was saved
  /// under (RestoredState::step, from_layout), assembling nothing (fd invalid, no offsets).
  bool probe = false;
  /// Reshape: registered buffer name -> the ranges of the saved buffer of that name it is filled
  /// from (bytes not covered are zero), instead of the sharding rule. Computed by the trainer
  /// for the saved layout `remap_layout`; another one is Busy (probe again).
  struct Segment {
    uint64_t src = 0;  ///< offset in the saved (global) buffer
    uint64_t dst = 0;  ///< offset in the registered buffer
    uint64_t length = 0;
  };
  std::string remap_layout;
  std::map<std::string, std::vector<Segment>> remap;
  /// Deliver by streaming where the state needs no assembly in reftd's memory (see
  /// RestoreSink); nullptr, or a restore that needs it (decoding, reshape), gives a memfd.
  RestoreSink* sink = nullptr;
  /// A read: the decision as for a restore (reshape set), then these byte ranges of saved
  /// buffers of step `read_step` instead of the registered buffers (a reader that locates state
  /// in a step's own records, e.g. PyTorch DCP's metadata), one after another in the memfd
  /// (RestoredState::size is their sum). Busy when the decision chose another step.
  struct Read {
    std::string name;
    int pp = 0;
    int tp = 0;
    uint64_t begin = 0;
    uint64_t end = 0;
  };
  int64_t read_step = -1;
  std::vector<Read> reads;
};

class RestoreProvider {
 public:
  virtual ~RestoreProvider() = default;
  /// \brief Assembles the newest step committed job-wide for the rank `meta` describes (its
  /// registered buffers, layout and protection as the restarted trainer declares them).
  /// InvalidArgument when the snapshots were taken with other buffers/layout/protection;
  /// Lost naming what cannot be rebuilt when neither memory nor the persistent tier has it;
  /// Timeout/Unavailable when sources stop answering (never hangs past its deadline).
  virtual Result<RestoredState> Restore(const protect::SlotMeta& meta,
                                        const RestoreRequest& request) = 0;
};

}  // namespace reft::local
