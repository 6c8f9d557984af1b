#pragma once
/// \file metrics.h
/// \brief reftd's Prometheus metrics (docs/metrics.md): one registry, an optional HTTP
/// exposer, and typed handles that the daemon components keep and bump on their hot paths.
///
/// Every labelled series is created once in the constructor and stored in an array indexed
/// by an enum, so recording never looks anything up in a map and never takes a lock of ours
/// (prometheus-cpp counters/gauges are atomics; a histogram observation takes one short
/// per-histogram mutex).

#include <array>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "reft/mutex.h"
#include "reft/result.h"

namespace prometheus {
class Counter;
class Exposer;
class Gauge;
class Histogram;
class Registry;
}  // namespace prometheus

namespace reft::observability {

/// Where bytes of a restore or rebuild came from (label `source`): the members' own data
/// (shards, unique buffers, meta) read from this node's store (`local`) or from other nodes
/// (`peer`), ARC / peer / AOR copies (`replica`), AEC or RS parity (`parity`), the persistent
/// tier (`persistent`). Every recovered byte is counted once.
enum class RecoverySource : int { kLocal = 0, kPeer, kReplica, kParity, kPersistent, kCount };

/// Restore/rebuild operation (label `operation`).
enum class RecoveryOperation : int { kRestore = 0, kRebuild, kCount };

/// Phases of a restore or rebuild (label `phase`), those of recovery::RestoreStats: locate
/// (commit sync, manifests, meta), fetch (verified reads), decode (ARC copy, XOR, RS), deliver
/// (hand the state to the trainer), rebuild (regenerate a lost rank's slot here).
enum class RecoveryPhase : int { kLocate = 0, kFetch, kDecode, kDeliver, kRebuild, kCount };

/// Phases of a recovery from a node's loss to a rank's restore (label `phase` of
/// reft_recovery_phase_seconds), each the time from the phase before: detect (lost → declared),
/// decide (declared → decided), stage (decided → staged), reconnect (decided or staged → the
/// trainer's hello), restore (reftd's restore of the rank).
enum class LossPhase : int { kDetect = 0, kDecide, kStage, kReconnect, kRestore, kCount };

/// Why a persist of this node's ranks failed (label `reason`): the directory is missing (or
/// not a directory), full, not writable, another file-system error, or anything else (e.g. the
/// slot was freed by a newer commit before it could be written).
enum class PersistFailure : int { kMissingDir = 0, kNoSpace, kPermission, kIo, kOther, kCount };

/// Membership state of a peer as seen by this node (label `state`).
enum class PeerState : int { kAlive = 0, kSuspect, kDead, kLeft, kCount };

/// Where a caller without the right credentials was turned away (label `endpoint`): a gRPC call
/// the Authorizer refused (Peer or Admin), or a connection to the bulk port without an
/// expected ticket.
enum class RefusedAt : int { kGrpc = 0, kBulkPort, kCount };

const char* ToString(RecoverySource source);
const char* ToString(RecoveryOperation operation);
const char* ToString(RecoveryPhase phase);
const char* ToString(LossPhase phase);
const char* ToString(PeerState state);
const char* ToString(PersistFailure reason);
const char* ToString(RefusedAt endpoint);

/// \brief Owns the metric families. Thread-safe: all recording methods may be called from
/// any thread concurrently. Handles stay valid for the lifetime of the Metrics object.
class Metrics {
 public:
  /// \brief Creates the registry and, when `listen_address` is not empty, an HTTP exposer
  /// serving GET /metrics on it ("HOST:PORT"; port 0 picks a free port). An address that
  /// cannot be bound is InvalidArgument naming the config key `metrics_listen`.
  static Result<std::unique_ptr<Metrics>> Create(const std::string& listen_address);

  ~Metrics();
  Metrics(const Metrics&) = delete;
  Metrics& operator=(const Metrics&) = delete;

  /// Port the exposer listens on; 0 when the exposer is disabled.
  int port() const { return port_; }

  /// Registry, e.g. for `reftctl metrics`-style text serialisation without HTTP.
  const std::shared_ptr<prometheus::Registry>& registry() const { return registry_; }

  /// Prometheus text exposition (format 0.0.4) of everything in the registry (runs the
  /// refresh hook first, like a scrape).
  std::string Serialize() const;

  /// \brief Sets a function run right before every scrape and Serialize(), for gauges that
  /// are cheaper to read on demand than to keep current (e.g. the store's Usage() for
  /// slots/memory). It runs on the exposer's thread; it must be thread-safe and must not
  /// call Serialize(). Pass an empty function to remove it.
  void SetRefreshHook(std::function<void(Metrics&)> hook);

  // --- snapshots (store / local channel) ---
  /// One snapshot of `bytes` was taken (copied into host memory).
  void RecordSnapshot(uint64_t bytes);
  /// The trainer was blocked for `seconds` by a snapshot call (fence wait + handoff).
  void ObserveTrainerBlocked(double seconds);
  /// A step became committed `seconds` after the snapshot started.
  void ObserveCommitLatency(double seconds);

  // --- store state (gauges; set, not accumulated) ---
  void SetSlots(double slots);
  void SetMemoryUsed(double bytes);
  void SetMemoryLimit(double bytes);

  // --- recovery ---
  void ObserveRecoveryPhase(RecoveryOperation operation, RecoveryPhase phase, double seconds);
  void AddBytesRecovered(RecoverySource source, uint64_t bytes);
  /// One phase of a recovery a restore on this node completed (docs/recovery.md "Phases").
  void ObserveLossPhase(LossPhase phase, double seconds);
  void IncChecksumFailures(uint64_t n = 1);

  // --- persistent tier ---
  /// This node wrote `bytes` (rank files and manifest) of a step in `seconds`.
  void ObservePersist(double seconds, uint64_t bytes);
  /// A persist of this node's ranks failed (nothing is counted for skipped persists).
  void IncPersistFailures(PersistFailure reason);

  // --- trust ---
  /// A session or an Admin call on a job was refused: the caller is not the job's owner.
  void IncJobAccessDenied();
  /// Faults on mappings a client shrank, repaired instead of killing reftd (fault_guard.h):
  /// `total` is the process-wide count so far (the counter follows it).
  void SetRepairedFaults(uint64_t total);
  /// Calls and connections refused at `endpoint` so far (the counter follows `total`).
  void SetRefused(RefusedAt endpoint, uint64_t total);
  /// Bulk connections this node served so far (the counter follows `total`).
  void SetBulkConnections(uint64_t total);

  // --- peer copies (ring copies of unique and sharded buffers before a seal) ---
  /// Bytes this node's peer copies read on this node and pulled from other nodes so far
  /// (the counters follow the totals).
  void SetPeerCopyBytes(uint64_t local_total, uint64_t remote_total);

  /// Jobs the control plane keeps state for on this node (job records, docs/security.md).
  void SetJobsFollowed(double jobs);
  /// Totals of the persist holds this node's job coordinators applied (coord::CommitHoldStats):
  /// seconds commits waited for the nodes' pins, and holds that ran out.
  void SetCommitHolds(double held_seconds_total, uint64_t timeouts_total);

  // --- planner ---
  /// Bytes of layers a transfer plan staged on this node, held for reshaped restores.
  void SetStagedBytes(double bytes);
  /// This node staged `bytes` of layers (its part of a transfer plan).
  void AddStagedBytes(uint64_t bytes);
  /// A node of a transfer plan finished staging what it lacks (as the job's coordinator sees it).
  void IncTransferHosts(bool ok);

  // --- membership ---
  /// Deaths held while the control plane is suspect (peer::DeathHoldStatus): gauges for now,
  /// counters following the totals.
  void SetDeathHolds(bool suspect, double held, uint64_t held_total, uint64_t released_total,
                     uint64_t declared_total, uint64_t reregistrations_total);
  /// Departures this node declared to its listeners so far (the counter follows `total`).
  void SetDeathsDeclared(uint64_t total);
  /// Suspicions this node looked into, by outcome (peer::SuspicionStats; counters follow).
  void SetSuspicions(uint64_t received, uint64_t confirmed, uint64_t refuted, uint64_t unresolved,
                     uint64_t dropped);
  /// Number of peers currently in `state` (the peer component sets all states each round).
  void SetPeers(PeerState state, double count);
  void ObserveGossipRoundTrip(double seconds);

 private:
  class Refreshing;
  Metrics();
  void RunRefreshHook() const;

  std::shared_ptr<prometheus::Registry> registry_;
  std::shared_ptr<Refreshing> refreshing_;  // what the exposer collects: hook, then registry
  std::unique_ptr<prometheus::Exposer> exposer_;
  mutable Mutex hook_mu_;
  std::function<void(Metrics&)> hook_ REFT_GUARDED_BY(hook_mu_);
  int port_ = 0;

  prometheus::Counter* snapshot_bytes_ = nullptr;
  prometheus::Counter* snapshots_ = nullptr;
  prometheus::Histogram* trainer_blocked_ = nullptr;
  prometheus::Histogram* commit_latency_ = nullptr;
  prometheus::Gauge* slots_ = nullptr;
  prometheus::Gauge* memory_used_ = nullptr;
  prometheus::Gauge* memory_limit_ = nullptr;
  std::array<std::array<prometheus::Histogram*, static_cast<int>(RecoveryPhase::kCount)>,
             static_cast<int>(RecoveryOperation::kCount)>
      phase_{};
  std::array<prometheus::Counter*, static_cast<int>(RecoverySource::kCount)> recovered_{};
  std::array<prometheus::Histogram*, static_cast<int>(LossPhase::kCount)> loss_phase_{};
  prometheus::Counter* checksum_failures_ = nullptr;
  prometheus::Counter* job_access_denied_ = nullptr;
  prometheus::Counter* repaired_faults_ = nullptr;
  std::array<prometheus::Counter*, static_cast<int>(RefusedAt::kCount)> refused_{};
  prometheus::Counter* bulk_connections_ = nullptr;
  std::array<prometheus::Counter*, 2> peer_copy_bytes_{};  // local, remote
  std::array<prometheus::Gauge*, static_cast<int>(PeerState::kCount)> peers_{};
  prometheus::Histogram* persist_duration_ = nullptr;
  prometheus::Counter* persist_bytes_ = nullptr;
  std::array<prometheus::Counter*, static_cast<int>(PersistFailure::kCount)> persist_failures_{};
  prometheus::Histogram* gossip_rtt_ = nullptr;
  prometheus::Gauge* staged_ = nullptr;
  prometheus::Gauge* jobs_followed_ = nullptr;
  prometheus::Counter* commit_held_seconds_ = nullptr;
  prometheus::Counter* commit_hold_timeouts_ = nullptr;
  prometheus::Counter* staged_total_ = nullptr;
  prometheus::Gauge* control_plane_suspect_ = nullptr;
  prometheus::Gauge* deaths_held_ = nullptr;
  std::vector<prometheus::Counter*> suspicions_;  // received, confirmed, refuted, unresolved, dropped
  std::array<prometheus::Counter*, 3> death_holds_{};  // held, released, declared
  prometheus::Counter* reregistrations_ = nullptr;
  prometheus::Counter* deaths_declared_ = nullptr;
  std::array<prometheus::Counter*, 2> transfer_hosts_{};  // failed, done
};

}  // namespace reft::observability
