#pragma once
/// \file local_server.h
/// \brief The daemon end of the local channel: a Unix SOCK_SEQPACKET socket that trainers
/// (libreft) connect to. Owns the listening socket, one epoll loop thread, a small pool of
/// copy workers, and one Session per connected client process.
///
/// Every accepted peer is checked with SO_PEERCRED against the allowed uid/gid lists; every
/// frame is bounded (local_proto::Limits). A session's requests run in order on the worker
/// pool; a client that hangs up (crash, SIGKILL, exit) has its writing slot aborted (the
/// partial snapshot is discarded, the committed one untouched) and its device imports closed.

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "reft/local/commit_coordinator.h"
#include "reft/local/failure_reports.h"
#include "reft/local/job_owners.h"
#include "reft/local/plan_source.h"
#include "reft/local/recovery_hooks.h"
#include "reft/local_proto/frame.h"
#include "reft/result.h"
#include "reft/store/snapshot_store.h"

namespace reft::local {

struct LocalServerOptions {
  std::string socket_path;  ///< required; a stale socket file at this path is replaced
  /// Peers allowed to connect. Both empty: only the daemon's own uid and root. Otherwise a peer
  /// is allowed when its uid is listed, or its gid is listed, or it is root/the daemon's uid.
  std::vector<uid_t> allowed_uids;
  std::vector<gid_t> allowed_gids;
  /// Mode of the socket file. 0 = derived: 0600 with no lists, 0660 with gids only, 0666 when
  /// other uids are allowed (authorisation is then done by SO_PEERCRED, not by the mode).
  mode_t socket_mode = 0;
  int copy_threads = 2;           ///< workers running session requests (pulls, seals, restores)
  uint32_t max_sessions = 1024;
  /// Sessions one uid (SO_PEERCRED) may hold at once, so that one user's clients cannot take
  /// every one of max_sessions from the others (local.max_sessions_per_uid).
  uint32_t max_sessions_per_uid = 64;
  uint32_t max_protocol_errors = 8;  ///< a client sending more bad frames is disconnected
  int send_timeout_ms = 10000;       ///< a client that does not read its replies is dropped
  /// A streamed restore hands pieces over in a ring of shared memory (local_proto/stream.h);
  /// one of this size is made at Start (fresh pages cost a restore about what moving as many
  /// bytes does) and rings are kept between restores. reftd sets it to StreamRingBytes() of
  /// its restore settings; 0 = none made ahead.
  uint64_t stream_ring_bytes = 0;
  local_proto::Limits limits;
  std::string daemon_version = "0.1.0";
  /// Shard alignment of the sharding function (protect::SlotMeta::shard_chunk), the same on
  /// every node of a job: rank plans are computed from it.
  uint64_t shard_chunk = 64 << 10;
  /// Longest wait for a ring neighbour to publish the unique buffers this rank copies (its
  /// "peer/<name>" regions); past it the step fails on this rank and is never committed.
  int peer_copy_timeout_ms = 30000;
  /// AOR (docs/protection.md "AOR in reftd"): host threads one session's replay of an
  /// "aor/<name>" region uses (the copy and the AdamW update run block by block on them).
  int aor_threads = 2;
  /// AOR resync interval (local.aor_resync_steps): one replay in this many (counted since the
  /// owner's state was last copied or compared) is also copied from rank dp+1's published
  /// shard and compared with the replay; 1 = every replay. A difference counts in
  /// SessionInfo::aor_mismatches and turns AOR off for that shard (copied from then on, "off:
  /// mismatch at step S"). Checks the replay in production at one network copy every this many
  /// steps. 0 = never after probation.
  uint32_t aor_resync_steps = 1000;
  /// AOR probation (local.aor_probation_steps): every replica, once copied in, has its first
  /// this many replays copied and compared as well, and is trusted only if all match; a
  /// mismatch turns AOR off for the shard like one at a resync. 0 = none.
  uint32_t aor_probation_steps = 3;
  /// Replay optimizer shards registered in device memory (CUDA, ROCm, emulated) too
  /// (local.aor_device_optimizers). Off by default: the trainer's GPU kernels are not what the
  /// host replays, and nothing here can check them bit for bit; such shards are copied
  /// ("off: optimizer on cuda").
  bool aor_device_optimizers = false;
  /// Who owns each job (job_ownership.h: the node's JobOwners, or etcd's record); must outlive
  /// the server. Null: the server keeps its own in memory (ownership is then enforced but
  /// forgotten at exit).
  JobOwnership* job_owners = nullptr;
  /// This node's id, recorded with the claims its trainers make ("" in tests).
  std::string node_id;
};

/// \brief The cluster layer's implementations of the local channel's seams (recovery_hooks.h,
/// plan_source.h): daemon/recovery's and the planner's in reftd. `copier` and `restorer` are
/// required; without `plans` a plan query is Unavailable ("this daemon has no planner").
struct ClusterHooks {
  PeerCopier* copier = nullptr;
  RestoreProvider* restorer = nullptr;
  PlanSource* plans = nullptr;
  FailureReports* failures = nullptr;  ///< null: failure reports are Unavailable
};

/// \brief One connected client, as shown by `reftctl status`.
struct SessionInfo {
  uint64_t id = 0;
  pid_t pid = 0;
  uid_t uid = 0;
  gid_t gid = 0;
  bool joined = false;        ///< hello accepted
  store::RankKey rank;        ///< valid when joined
  JobLayout layout;
  std::string protection;     ///< canonical protection string
  uint32_t buffers = 0;       ///< registered buffers
  uint64_t buffer_bytes = 0;
  int64_t writing_step = -1;  ///< step being written, -1 = none
  int64_t last_complete_step = -1;
  uint64_t snapshots = 0;     ///< snapshots completed in this session
  uint64_t peer_copies = 0;   ///< "peer/<name>" regions copied from rank dp+1
  /// AOR: "aor/<name>" regions advanced by host replay, and filled by a copy from rank dp+1
  /// instead (first snapshot of the session, a missed step, a restore, AOR off for the shard).
  uint64_t aor_replays = 0;
  uint64_t aor_copies = 0;
  /// Replays also compared with the owner's copy (probation and periodic resyncs), and those
  /// that differed from it (each turns AOR off for its shard).
  uint64_t aor_verified = 0;
  uint64_t aor_mismatches = 0;
  /// AOR of the session's replayed shards: "" (none), "probation", "on", "off: <why>" (e.g.
  /// "off: mismatch at step 7", "off: optimizer on cuda"); with several shards that are not
  /// all alike, "'opt': on; 'opt2': off: ...".
  std::string aor_state;
  std::string aor_last_copy;  ///< why the last copy happened, e.g. "missed iterations 7..7"
  double aor_replay_seconds = 0;  ///< total host time of the replays
  double aor_copy_seconds = 0;    ///< total time of the copies (network or local)
};

struct LocalServerStats {
  uint64_t accepted = 0;
  uint64_t rejected_peers = 0;   ///< refused by SO_PEERCRED, max_sessions or its per-uid limit
  uint64_t rejected_frames = 0;  ///< malformed, truncated, oversized or out-of-order frames
  uint64_t closed_sessions = 0;
  uint64_t failed_replies = 0;   ///< replies (mostly error frames) a client did not take
};

/// \brief The ring a streamed restore reading `in_flight` pieces of `piece_bytes` at once takes:
/// a slot per piece in flight and two the trainer copies out of, at most 256 MiB (then fewer
/// slots: the fetch workers wait for the trainer), at least two slots.
uint64_t StreamRingBytes(uint64_t piece_bytes, int in_flight);

/// \brief Thread-safe. Create() binds nothing; Start() binds, listens and starts the threads;
/// Stop() (also run by the destructor) closes every session and joins every thread.
class LocalServer {
 public:
  /// \brief `store`, `coordinator` and the hooks must outlive the server.
  static Result<std::unique_ptr<LocalServer>> Create(const LocalServerOptions& options,
                                                     store::SnapshotStore* store,
                                                     CommitCoordinator* coordinator,
                                                     ClusterHooks hooks);
  ~LocalServer();
  LocalServer(const LocalServer&) = delete;
  LocalServer& operator=(const LocalServer&) = delete;

  /// \brief Binds the socket (replacing a stale one; refusing when another server answers on
  /// it), sets its mode, and starts the loop thread "reft-local" and workers "reft-copy-N".
  Status Start();
  /// \brief Stops accepting, hangs up every session (aborting their writing slots), joins all
  /// threads and removes the socket file. Idempotent.
  void Stop();

  std::vector<SessionInfo> Sessions() const;
  LocalServerStats Stats() const;
  const std::string& socket_path() const;

 private:
  LocalServer() = default;
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace reft::local
