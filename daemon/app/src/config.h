#pragma once
/// \file config.h
/// \brief reftd configuration: TOML file, then command-line flags (docs/protocol.md "reftd"), validated
/// with errors that name the bad key.

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "reft/result.h"
#include "reft/security/grpc_auth.h"

namespace reft::app {


struct DaemonConfig {
  std::string node_id;                       ///< default: hostname
  std::string listen = "127.0.0.1:7070";     ///< gRPC (peers and admin)
  std::string socket = "/run/reft/reftd.sock";
  std::string shm_dir = "/dev/shm/reft";
  std::string persist_dir;                   ///< empty = persistent tier disabled
  std::vector<std::string> peers;            ///< seed list H:P
  uint64_t memory_limit = 0;                 ///< 0 = unlimited
  std::string log_level = "info";            ///< trace|debug|info|warn|error|critical|off
  std::string metrics_listen;                ///< Prometheus endpoint HOST:PORT; empty = off

  // [store]
  uint64_t chunk_size = 4ull << 20;
  uint64_t shard_alignment = 64ull << 10;    ///< sharding function's alignment; same on all nodes
  uint32_t slots_per_rank = 3;
  mode_t file_mode = 0600;
  std::string file_group;                    ///< group name for 0640 files; empty = unchanged
  int checksum_threads = 0;                  ///< 0 = auto (ChecksumThreads)
  bool prefault = true;

  // [local]
  std::vector<uint32_t> allowed_uids;        ///< empty = the daemon's own uid and root
  std::vector<uint32_t> allowed_gids;
  uint64_t max_message_bytes = 64ull << 10;  ///< upper bound of one local-channel frame payload
  int copy_threads = 2;
  uint32_t peer_copy_timeout_ms = 30000;     ///< wait for the ring neighbour's unique buffers
  uint32_t max_sessions_per_uid = 64;        ///< local sessions one uid may hold at once
  // AOR (docs/protection.md "AOR in reftd"): replay threads per session, the replays after
  // which one is compared with the owner's copy, the replays every new replica has compared
  // before it is trusted, and whether device-memory optimizer shards are replayed at all.
  int aor_threads = 2;
  uint32_t aor_resync_steps = 1000;  ///< 0 = no periodic comparison after probation
  uint32_t aor_probation_steps = 3;  ///< 0 = no probation
  bool aor_device_optimizers = false;

  // [emulated]
  uint64_t emulated_bandwidth = 0;           ///< bytes/s of the emulated copy engine; 0 = memcpy

  // [admin]
  uint64_t max_grpc_message_bytes = 16ull << 20;

  // [peer]
  std::string advertise;                     ///< address peers reach us at; default = listen
  uint32_t probe_interval_ms = 500;          ///< SWIM protocol period
  uint32_t probe_timeout_ms = 250;           ///< deadline of one ping
  uint32_t indirect_probes = 2;
  uint32_t suspicion_timeout_ms = 2000;      ///< suspect -> dead
  uint64_t peer_bandwidth = 0;               ///< bytes/s per peer stream set; 0 = unlimited
  uint64_t link_bandwidth = 0;               ///< bytes/s from all peers together; 0 = unlimited
  /// Where FetchRegion's bytes travel: "auto" (a bulk TCP connection when the Peer channel is
  /// plain text, gRPC streams under TLS), "tcp" (always the bulk connection), "grpc" (never).
  std::string bulk_transport = "auto";
  uint32_t bulk_port = 0;                    ///< the bulk listener's port; 0 = any free port

  // [etcd] the control plane (docs/coordination.md); --etcd H:P,...
  std::vector<std::string> etcd_endpoints;   ///< empty = gossip between the daemons (no consensus)
  uint32_t etcd_lease_ttl_s = 5;             ///< a node is declared dead this long after it stops
  uint32_t etcd_lease_renewals_per_s = 1000;  ///< longer TTLs past 3 x nodes / this (0: fixed)
  /// More lease lapses than this share of the nodes within one TTL: the control plane is
  /// suspected, and deaths are held until a probe confirms them (docs/coordination.md).
  double etcd_mass_expiry_fraction = 0.05;
  uint32_t etcd_request_timeout_ms = 3000;   ///< one etcd call on one member
  std::string etcd_tls_ca;                   ///< client TLS to etcd: CA, and a client cert + key
  std::string etcd_tls_cert;
  std::string etcd_tls_key;

  // [coordinator] the job coordinator's commit (docs/coordination.md "Reports aggregate on the way")
  /// Jobs on at least this many nodes send completion reports through aggregators (0: never).
  uint32_t coordinator_aggregate_from_nodes = 64;

  // [jobs] job records (docs/operations.md "Job records")
  /// A job nobody uses any more (no trainer, no slot on a live node, not coordinated, no plan
  /// waiting, nothing persisted) has its records, owner included, deleted this long after.
  uint32_t jobs_forget_after_s = 600;

  // [restore] REFT-load and node rebuild (recovery::RecoveryOptions)
  int restore_concurrency = 4;               ///< pieces fetched at once
  uint64_t restore_piece_bytes = 8ull << 20;
  uint32_t restore_piece_timeout_ms = 30000; ///< a source hanging longer is abandoned
  uint32_t restore_timeout_ms = 300000;      ///< bound of a whole restore/rebuild/check
  bool rebuild_on_restore = true;            ///< regenerate a lost rank's slot on restore
  /// How long a restore waits for the holders of the job's slots to answer (alive but silent:
  /// just started, paused, slow) before it gives up on them; never longer than the whole restore.
  uint32_t restore_agreement_timeout_ms = 60000;
  /// Layers a transfer plan staged here for a job that never commits here again are dropped
  /// this long after they were last used (recovery::StagedLayersOptions::grace).
  uint32_t restore_staged_grace_s = 900;

  // [persist] persistent tier (persist_dir)
  int64_t persist_every_steps = 0;           ///< persist each K-th committed step; 0 = on demand
  uint64_t persist_bandwidth = 0;            ///< bytes/s of persist writes; 0 = unlimited
  uint64_t persist_read_bandwidth = 0;       ///< bytes/s of restores from the tier; 0 = unlimited
  uint32_t persist_keep = 2;                 ///< complete persisted steps kept per job; 0 = all
  /// How long a persist holds the job's next commit for every node to pin the step (etcd
  /// only; docs/persist.md "Persist and commit"); 0 = no hold (the persist races the commit).
  uint32_t persist_commit_hold_ms = 5000;

  // [planner] the planner in the loop (docs/planner.md "The online path")
  std::string planner_mode = "automatic";    ///< off | automatic | confirm
  uint32_t planner_spare_wait_ms = 30000;    ///< the longest wait for a spare, when waiting pays

  // [security]
  security::SecurityOptions security;
};

/// \brief Parses argv (flags override the file given by --config). On `--help`/`--version`
/// returns Cancelled with the text to print in the message. Any usage or config error is
/// InvalidArgument with one line naming the flag or key.
Result<DaemonConfig> ParseDaemonArgs(int argc, const char* const* argv);

/// \brief Reads and validates a TOML file into `config` (unknown keys are errors).
Status LoadConfigFile(const std::string& path, DaemonConfig* config);

/// \brief Cross-field validation (addresses, modes, sizes).
Status ValidateConfig(const DaemonConfig& config);

/// \brief `checksum_threads`, or when it is 0 half the cores, 1..8: sealing a slot (checksumming
/// every chunk) must keep up with a device pull (~55 GB/s on a PCIe 5 GPU) that one XXH3 thread
/// (~10-15 GB/s) cannot.
int ChecksumThreads(const DaemonConfig& c);

}  // namespace reft::app
