#include "daemon.h"

#include <grp.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>

#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>
#include <spdlog/spdlog.h>

#include "admin_service.h"
#include "job_failure_reports.h"
#include "etcd_credentials.h"
#include "metered_commit_coordinator.h"
#include "transfer_wiring.h"
#include "notify.h"
#include "reft/coord/etcd_control_plane.h"
#include "reft/coord/etcd_job_owners.h"
#include "reft/coord/gossip_control_plane.h"
#include "reft/fault_guard.h"
#include "reft/memory_file_system.h"
#include "reft/kernels/emulated.h"
#include "reft/local/commit_coordinator.h"
#include "reft/local/local_server.h"
#include "reft/observability/metrics.h"
#include "reft/peer/peer_node.h"
#include "reft/peer/rank_id.h"
#include "reft/protect/slot_meta.h"
#include "reft/persister/persister.h"
#include "reft/recovery/published_copier.h"
#include "reft/replan/job_model.h"
#include "reft/replan/job_planner.h"
#include "local_job_records.h"
#include "reft/replan/plan_profiles.h"
#include "reft/replan/restore_phases.h"
#include "reft/unix_time.h"
#include "reft/replan/step_cadence.h"
#include "reft/recovery/reft_load.h"
#include "reft/recovery/tier_access.h"
#include "reft/security/authorizer.h"
#include "reft/security/operator_socket.h"
#include "reft/store/snapshot_store.h"
#include "reft/units.h"

namespace reft::app {

struct Daemon::Impl {
  Result<size_t> OpenStore();  ///< returns the number of adopted slots
  void ReadOnScrape();         ///< the metrics refresh hook, once every component exists
  Status CreateSecurity();
  Status CreatePeer();
  void CreateRecovery();
  Status OpenJobOwners();
  Status StartLocalChannel();
  Status StartJobRecords();
  Status StartGrpc();

  DaemonConfig config;
  std::unique_ptr<observability::Metrics> metrics;  // outlives every component that records
  std::unique_ptr<store::SnapshotStore> store;
  std::unique_ptr<peer::PeerNode> peer;
  // Fed by the commit coordinator.
  std::unique_ptr<replan::StepCadence> cadence = std::make_unique<replan::StepCadence>();
  // Layers a transfer plan staged here; dropped when the job commits a newer step, or after
  // `restore.staged_grace_s` unused (made with the configuration).
  std::unique_ptr<recovery::StagedLayers> staged;
  std::unique_ptr<local::CommitCoordinator> coordinator;
  std::unique_ptr<replan::PlanProfiles> profiles;        // `reftctl plan attach`
  std::unique_ptr<replan::JobPlanner> planner;           // publishes decisions on node loss
  std::unique_ptr<recovery::ReftLoad> restore;          // before peer goes (uses it)
  // When each rank's trainer said hello here, and the restore the local channel calls: REFT-load
  // with the phases of the recovery in its report (docs/recovery.md "Phases of a recovery").
  std::unique_ptr<replan::RankHellos> hellos = std::make_unique<replan::RankHellos>();
  std::unique_ptr<replan::PhasedRestore> phased_restore;
  std::unique_ptr<recovery::PublishedCopier> copier;
  std::unique_ptr<recovery::TierAccess> tier;           // persistent tier, opened lazily
  std::unique_ptr<persister::Persister> persister;       // before peer and tier go
  // The node's own record of job owners (the registry without etcd; imported into etcd with
  // it), and the registry the local channel and Admin ask: this one, or etcd's.
  std::unique_ptr<local::JobOwners> local_owners;
  local::JobOwnership* owners = nullptr;
  std::unique_ptr<JobFailureReports> failure_reports;  // `reft.elastic.report_failure`
  std::unique_ptr<local::LocalServer> local_server;
  // The job records `reftctl jobs` shows and releases: etcd's (the peer's), else this node's own
  // (its owners, sessions, slots and tier), whose sweeper forgets the owners of gone jobs.
  std::unique_ptr<LocalJobRecords> local_records;
  peer::JobRecords* records = nullptr;
  std::string token;                                     // shared token ("" = none)
  std::unique_ptr<security::OperatorSocket> admin_socket;  // reftctl --socket
  std::unique_ptr<security::Authorizer> auth;            // every Admin and Peer call
  std::unique_ptr<AdminService> admin;
  std::unique_ptr<grpc::Server> grpc_server;
  std::string serving;  // config.listen with the port the server bound (the kernel's for ":0")
};

Daemon::Daemon(DaemonConfig config) : impl_(std::make_unique<Impl>()) {
  impl_->config = std::move(config);
  recovery::StagedLayersOptions staged;
  staged.grace = std::chrono::seconds(impl_->config.restore_staged_grace_s);
  impl_->staged = std::make_unique<recovery::StagedLayers>(staged);
}

Daemon::~Daemon() { Shutdown(); }

Result<std::unique_ptr<Daemon>> Daemon::Create(DaemonConfig config) {
  return std::unique_ptr<Daemon>(new Daemon(std::move(config)));
}

namespace {

Result<store::StoreOptions> MakeStoreOptions(const DaemonConfig& c) {
  store::StoreOptions o;
  o.shm_dir = c.shm_dir;
  o.memory_limit = c.memory_limit;
  o.chunk_size = c.chunk_size;
  o.slots_per_rank = c.slots_per_rank;
  o.file_mode = c.file_mode;
  o.prefault = c.prefault;
  o.checksum_threads = ChecksumThreads(c);
  if (!c.file_group.empty()) {
    struct group* g = getgrnam(c.file_group.c_str());
    if (!g) return Status::InvalidArgument("store.file_group: no group named '" + c.file_group + "'");
    o.file_group = g->gr_gid;
  }
  return o;
}

void LogAdoption(const store::AdoptionReport& report) {
  for (const auto& slot : report.adopted) {
    spdlog::info("adopted {} slot {} step {} ({})", slot.rank.ToString(), slot.index, slot.step,
                 store::SlotStateName(slot.state));
  }
  for (const auto& path : report.discarded_partial) {
    spdlog::warn("discarded partial snapshot {}", path);
  }
  for (const auto& reason : report.quarantined) spdlog::error("quarantined {}", reason);
}

std::string AdminSocketPath(const DaemonConfig& c) { return c.socket + ".admin"; }

// Restore/rebuild phases and bytes by source (docs/metrics.md) from one operation's stats.
void RecordRecovery(observability::Metrics* m, const std::string& operation,
                    const recovery::RestoreStats& s) {
  using observability::RecoveryPhase;
  using observability::RecoverySource;
  const auto op = operation == "rebuild" ? observability::RecoveryOperation::kRebuild
                                         : observability::RecoveryOperation::kRestore;
  const std::pair<RecoveryPhase, std::chrono::nanoseconds> phases[] = {
      {RecoveryPhase::kLocate, s.locate}, {RecoveryPhase::kFetch, s.fetch},
      {RecoveryPhase::kDecode, s.decode}, {RecoveryPhase::kDeliver, s.deliver},
      {RecoveryPhase::kRebuild, s.rebuild}};
  for (const auto& [phase, d] : phases) {
    if (d.count() > 0) m->ObserveRecoveryPhase(op, phase, std::chrono::duration<double>(d).count());
  }
  m->AddBytesRecovered(RecoverySource::kLocal, s.bytes_own_local);
  m->AddBytesRecovered(RecoverySource::kPeer, s.bytes_own_peer);
  m->AddBytesRecovered(RecoverySource::kReplica, s.bytes_replica);
  m->AddBytesRecovered(RecoverySource::kParity, s.bytes_parity);
  m->AddBytesRecovered(RecoverySource::kPersistent, s.bytes_persistent);
}

// reft_recovery_phase_seconds (docs/metrics.md): each phase of a recovery a restore here
// completed, from the phase before it; a negative span (clock skew between nodes, a trainer
// that said hello before the decision was published) counts as 0.
void RecordRecoveryPhases(observability::Metrics* m, const replan::RecoveryPhases& p) {
  using observability::LossPhase;
  auto observe = [m](LossPhase phase, const std::optional<replan::PhaseMark>& from,
                     const std::optional<replan::PhaseMark>& to) {
    if (from && to) m->ObserveLossPhase(phase, std::max<int64_t>(0, to->at_ms - from->at_ms) / 1000.0);
  };
  observe(LossPhase::kDetect, p.lost_at, p.declared_at);
  observe(LossPhase::kDecide, p.declared_at, p.decided_at);
  observe(LossPhase::kStage, p.decided_at, p.staged_at);
  observe(LossPhase::kReconnect, p.staged_at ? p.staged_at : p.decided_at, p.reconnected_at);
  observe(LossPhase::kRestore, p.restore_started_at, p.restore_ended_at);
}

observability::PersistFailure ToMetric(persister::PersistFailureKind k) {
  switch (k) {
    case persister::PersistFailureKind::kMissingDir: return observability::PersistFailure::kMissingDir;
    case persister::PersistFailureKind::kNoSpace: return observability::PersistFailure::kNoSpace;
    case persister::PersistFailureKind::kPermission: return observability::PersistFailure::kPermission;
    case persister::PersistFailureKind::kIo: return observability::PersistFailure::kIo;
    case persister::PersistFailureKind::kOther: break;
  }
  return observability::PersistFailure::kOther;
}

// Creates the socket's directory if needed and removes a stale socket left by a killed daemon.
// A socket some process still answers on is refused, so a second reftd cannot take over the
// first one's admin endpoint; anything that is not a socket is never removed.
Status PrepareSocketPath(const std::string& path) {
  std::error_code ec;
  auto dir = std::filesystem::path(path).parent_path();
  if (!dir.empty()) std::filesystem::create_directories(dir, ec);
  if (ec) return Status::IoError("cannot create socket directory " + dir.string() + ": " + ec.message());
  struct stat st;
  if (lstat(path.c_str(), &st) != 0) return Status::OK();
  if (!S_ISSOCK(st.st_mode)) {
    return Status::AlreadyExists(path + " exists and is not a socket; refusing to replace it");
  }
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return Status::FromErrno(errno, "socket");
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::snprintf(addr.sun_path, sizeof(addr.sun_path), "%s", path.c_str());
  const bool live = connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  close(fd);
  if (live) return Status::AlreadyExists("another process is serving on " + path);
  if (unlink(path.c_str()) != 0) return Status::FromErrno(errno, "cannot remove stale socket " + path);
  return Status::OK();
}

local::LocalServerOptions MakeLocalOptions(const DaemonConfig& c) {
  local::LocalServerOptions o;
  o.socket_path = c.socket;
  o.allowed_uids.assign(c.allowed_uids.begin(), c.allowed_uids.end());
  o.allowed_gids.assign(c.allowed_gids.begin(), c.allowed_gids.end());
  o.copy_threads = c.copy_threads;
  o.limits.max_payload_bytes = static_cast<uint32_t>(c.max_message_bytes);
  o.daemon_version = REFT_VERSION;
  o.shard_chunk = c.shard_alignment;
  o.peer_copy_timeout_ms = static_cast<int>(c.peer_copy_timeout_ms);
  o.aor_threads = c.aor_threads;
  o.aor_resync_steps = c.aor_resync_steps;
  o.aor_probation_steps = c.aor_probation_steps;
  o.aor_device_optimizers = c.aor_device_optimizers;
  o.max_sessions_per_uid = c.max_sessions_per_uid;
  o.stream_ring_bytes =
      local::StreamRingBytes(c.restore_piece_bytes, static_cast<int>(c.restore_concurrency));
  return o;
}

// Sessions of the local channel as the Admin service reports them.
std::vector<v1::SessionInfo> ListSessions(const local::LocalServer* server) {
  std::vector<v1::SessionInfo> out;
  if (!server) return out;
  for (const auto& s : server->Sessions()) {
    if (!s.joined) continue;
    v1::SessionInfo info;
    peer::ToRankId(s.rank, info.mutable_rank());
    info.set_pid(s.pid);
    info.set_uid(s.uid);
    info.set_buffers(s.buffers);
    out.push_back(std::move(info));
  }
  return out;
}

}  // namespace

Status Daemon::Start() {
  const DaemonConfig& c = impl_->config;
  kernels::SetEmulatedCopyBandwidth(c.emulated_bandwidth);
  REFT_ASSIGN_OR_RETURN(impl_->metrics, observability::Metrics::Create(c.metrics_listen));
  REFT_ASSIGN_OR_RETURN(size_t adopted, impl_->OpenStore());
  REFT_RETURN_NOT_OK(impl_->CreateSecurity());
  REFT_RETURN_NOT_OK(impl_->CreatePeer());
  impl_->CreateRecovery();
  REFT_RETURN_NOT_OK(impl_->StartLocalChannel());
  REFT_RETURN_NOT_OK(impl_->StartJobRecords());
  REFT_RETURN_NOT_OK(impl_->StartGrpc());
  impl_->persister->Start();  // serves Peer.PersistStep; every-K schedule when configured
  impl_->planner->Start();    // after the membership: it plans on its changes
  impl_->ReadOnScrape();

  auto usage = impl_->store->Usage();
  std::string status = "node " + c.node_id + " serving on " + impl_->serving;
  if (const peer::BulkListener* bulk = impl_->peer->bulk()) {
    status += " (bulk transfers on port " + std::to_string(bulk->port()) + ")";
  }
  status += ", " + std::to_string(adopted) + " slots adopted";
  spdlog::info("{}; memory {} of {}", status, FormatBytes(usage.used),
               usage.limit ? FormatBytes(usage.limit) : std::string("unlimited"));
  NotifyReady(status);
  return Status::OK();
}

Result<size_t> Daemon::Impl::OpenStore() {
  REFT_ASSIGN_OR_RETURN(auto options, MakeStoreOptions(config));
  store::AdoptionReport report;
  REFT_ASSIGN_OR_RETURN(store, store::SnapshotStore::Open(options, &report));
  LogAdoption(report);
  if (const std::string fs = NonMemoryFileSystem(config.shm_dir); !fs.empty()) {
    spdlog::warn("shm_dir {} is on {}, not tmpfs: device copies into its slots cannot be "
                 "page-locked (they run unpinned, ~4x slower on a PCIe 5 GPU) and the kernel "
                 "writes the slots back to disk; put shm_dir on /dev/shm",
                 config.shm_dir, fs);
  }
  metrics->SetMemoryLimit(static_cast<double>(config.memory_limit));
  return report.adopted.size();
}

// Gauges and totals read when Prometheus scrapes, not maintained on the hot path. Set once
// every component they read exists; Shutdown removes the hook before it takes them down.
void Daemon::Impl::ReadOnScrape() {
  store::SnapshotStore* s = store.get();
  const recovery::StagedLayers* staged_layers = staged.get();
  const security::Authorizer* authorizer = auth.get();
  const peer::BulkListener* bulk = peer->bulk();
  const auto* etcd_jobs = dynamic_cast<const coord::EtcdJobCoordinator*>(peer->coordinator());
  const recovery::PublishedCopier* peer_copier = copier.get();
  const peer::NodeDirectory* nodes = &peer->membership();
  metrics->SetRefreshHook([s, staged_layers, authorizer, bulk, etcd_jobs, peer_copier,
                           nodes](observability::Metrics& m) {
    const peer::DeathHoldStatus deaths = nodes->DeathHolds();
    m.SetDeathHolds(deaths.suspect, static_cast<double>(deaths.held.size()), deaths.held_total,
                    deaths.released_total, deaths.declared_total, deaths.reregistrations_total);
    m.SetDeathsDeclared(deaths.deaths_declared_total);
    const peer::SuspicionStats& sus = deaths.suspicions;
    m.SetSuspicions(sus.received_total, sus.confirmed_total, sus.refuted_total,
                    sus.unresolved_total, sus.dropped_total);
    if (etcd_jobs != nullptr) {
      m.SetJobsFollowed(static_cast<double>(etcd_jobs->followed_jobs()));
      const auto holds = etcd_jobs->persist_hold().stats();
      m.SetCommitHolds(holds.held_seconds, holds.timeouts);
    }
    m.SetStagedBytes(static_cast<double>(staged_layers->bytes()));
    auto usage = s->Usage();
    m.SetMemoryUsed(static_cast<double>(usage.used));
    m.SetSlots(static_cast<double>(usage.slots));
    m.SetRepairedFaults(RepairedFaults());
    m.SetRefused(observability::RefusedAt::kGrpc, authorizer->refused());
    if (bulk != nullptr) {
      m.SetRefused(observability::RefusedAt::kBulkPort, bulk->refused());
      m.SetBulkConnections(bulk->served());
    }
    const auto copied = peer_copier->copied();
    m.SetPeerCopyBytes(copied.local, copied.remote);
  });
}

// The token, the admin socket (bound now, served once the gRPC server runs) and the Authorizer
// that Admin and Peer share (docs/security.md).
Status Daemon::Impl::CreateSecurity() {
  const security::SecurityOptions& o = config.security;
  if (!o.token_file.empty()) {
    REFT_ASSIGN_OR_RETURN(token, security::ReadTokenFile(o.token_file));
  }
  security::OperatorPolicy policy;
  policy.daemon_uid = geteuid();
  if (!o.operator_group.empty()) {
    REFT_ASSIGN_OR_RETURN(policy.operator_gid,
                          security::LookupGroup(o.operator_group, "security.operator_group"));
    policy.operator_group = o.operator_group;
  }
  REFT_RETURN_NOT_OK(PrepareSocketPath(AdminSocketPath(config)));
  REFT_ASSIGN_OR_RETURN(admin_socket,
                        security::OperatorSocket::Listen(AdminSocketPath(config), policy));
  auth = std::make_unique<security::Authorizer>(token, o.tls(), admin_socket.get(),
                                                o.operator_identities);
  if (!o.tls() && token.empty()) {
    spdlog::warn("no TLS and no token: any process that reaches {} can call Peer and Admin "
                 "(a loopback development setup; docs/security.md)", config.listen);
  } else if (!o.tls() && !security::IsLoopbackAddress(config.listen)) {
    spdlog::warn("the shared token travels in clear text on {} (security.allow_insecure)",
                 config.listen);
  }
  return Status::OK();
}

// Membership, manifests, shard streaming and the job-wide commit (docs/data-paths.md "Commit"). Every
// daemon runs it, also alone: a job whose ranks are all local simply commits without peers.
Status Daemon::Impl::CreatePeer() {
  const DaemonConfig& c = config;
  peer::PeerOptions po;
  po.job_free_regions = {protect::kRegionMeta};  // no training state (docs/security.md)
  po.node_id = c.node_id;
  po.advertise_address = c.advertise.empty() ? c.listen : c.advertise;
  po.seeds = c.peers;
  po.probe_interval = std::chrono::milliseconds(c.probe_interval_ms);
  po.probe_timeout = std::chrono::milliseconds(c.probe_timeout_ms);
  po.indirect_probes = c.indirect_probes;
  po.suspicion_timeout = std::chrono::milliseconds(c.suspicion_timeout_ms);
  po.peer_stream_bandwidth = c.peer_bandwidth;
  po.link_bandwidth = c.link_bandwidth;
  po.max_message_bytes = static_cast<int>(c.max_grpc_message_bytes);
  // A smaller message limit than the default wire chunk needs smaller wire chunks (4 KiB units).
  po.wire_chunk_bytes = std::max<uint64_t>(
      4096, std::min(peer::kMaxWireChunk, (c.max_grpc_message_bytes - 4096) / 4096 * 4096));
  // The bulk transport sends snapshot bytes in clear text: offered by default only where the
  // Peer channel is plain text too (docs/security.md "Bulk transport").
  if (c.bulk_transport == "tcp" || (c.bulk_transport == "auto" && !c.security.tls())) {
    po.bulk_listen = c.listen.substr(0, c.listen.rfind(':')) + ":" + std::to_string(c.bulk_port);
    po.bulk_fetch = true;
    if (c.security.tls()) {
      spdlog::warn("peer.bulk_transport = \"tcp\" under TLS: snapshot bytes travel unencrypted "
                   "on the bulk port (only for a fabric nobody else can reach)");
    }
  }
  peer::PeerSecurity ps;
  REFT_ASSIGN_OR_RETURN(ps.credentials, security::MakeChannelCredentials(c.security));
  ps.token = token;
  ps.authorizer = auth.get();
  peer::ControlPlaneFactory control_plane = coord::MakeGossipControlPlane();
  if (!c.etcd_endpoints.empty()) {
    coord::EtcdControlPlaneOptions eo;
    eo.etcd.endpoints = c.etcd_endpoints;
    eo.etcd.request_timeout = std::chrono::milliseconds(c.etcd_request_timeout_ms);
    REFT_ASSIGN_OR_RETURN(eo.etcd.credentials, MakeEtcdCredentials(c));
    eo.lease.floor = std::chrono::seconds(c.etcd_lease_ttl_s);
    eo.lease.renewals_per_s = c.etcd_lease_renewals_per_s;
    eo.mass_expiry_fraction = c.etcd_mass_expiry_fraction;
    eo.coordinator.aggregate_from_nodes = c.coordinator_aggregate_from_nodes;
    eo.records.forget_after = std::chrono::seconds(c.jobs_forget_after_s);
    REFT_ASSIGN_OR_RETURN(control_plane, coord::MakeEtcdControlPlane(eo));
  } else if (!c.peers.empty()) {
    spdlog::warn("no etcd configured: the {} peer(s) agree by gossip, which has no consensus "
                 "(restores may disagree under a partition or right after a node starts), does "
                 "not fence completions by the job's layout (a late completion made before a "
                 "reshape may count after it), does not hold commits for a persist and publishes "
                 "no plans; configure [etcd] endpoints for a multi-node cluster "
                 "(docs/coordination.md \"Gossip fallback\")",
                 c.peers.size());
  }
  REFT_ASSIGN_OR_RETURN(peer,
                        peer::PeerNode::Create(po, store.get(), std::move(ps), control_plane));
  recovery::StagedLayers* staged_layers = staged.get();
  if (auto* etcd_jobs = dynamic_cast<coord::EtcdJobCoordinator*>(peer->coordinator())) {
    // A job forgotten cluster-wide (docs/operations.md "Job records") leaves nothing here.
    replan::StepCadence* step_cadence = cadence.get();
    replan::RankHellos* rank_hellos = hellos.get();
    etcd_jobs->SetForgetListener([staged_layers, step_cadence, rank_hellos](const std::string& job) {
      staged_layers->DropBefore(job, std::numeric_limits<int64_t>::max());
      step_cadence->Forget(job);
      rank_hellos->Forget(job);
    });
    // A recovery's first commit (plan show) is the first the job's watch delivered here, not the
    // first a trainer on this node happened to ask about: one that waits less than a commit
    // takes would see a later step first.
    etcd_jobs->AddCommitListener([step_cadence](const std::string& job, int64_t step) {
      step_cadence->NoteCommitted(job, step, UnixMs());
    });
  }
  // Staged layers belong to the generation they were staged in: a fall-back to the tier
  // leaves none behind (staged_layers.h).
  peer->coordinator()->AddGenerationListener(
      [staged_layers](const std::string& job, const coord::JobGeneration& generation, int) {
        staged_layers->DropOtherGenerations(job, generation.generation);
      });
  coordinator = std::make_unique<MeteredCommitCoordinator>(
      peer->CoordinatorHandle(), store.get(), metrics.get(), cadence.get(),
      [staged_layers, step_cadence = cadence.get()](const std::string& job, int64_t step) {
        staged_layers->DropBefore(job, step);
        step_cadence->NoteCommitted(job, step, UnixMs());  // a recovery's first commit (plan show)
      },
      [rank_hellos = hellos.get()](const store::RankKey& rank) { rank_hellos->Note(rank, UnixMs()); });
  peer::NodeDirectory* membership = &peer->membership();
  observability::Metrics* m = metrics.get();
  membership->AddListener([membership, m](const peer::MemberInfo& info, peer::MemberState) {
    if (info.self) {
      // Declared dead while alive (a hang, a partition): the node rejoined with a new epoch.
      // Its slots hold sealed, checksummed bytes of the steps they name, and restores only
      // read the job-wide committed step, so nothing stale can be served; serve again.
      spdlog::warn("this node was declared dead by its peers; rejoined with epoch {}",
                   membership->epoch());
      membership->ClearFence();
    } else {
      spdlog::info("peer {} ({}) is {}", info.node_id, info.address,
                   peer::MemberStateName(info.state));
    }
    uint32_t counts[3] = {0, 0, 0};
    for (const auto& member : membership->Members()) {
      if (!member.self) counts[static_cast<int>(member.state)]++;
    }
    m->SetPeers(observability::PeerState::kAlive, counts[0]);
    m->SetPeers(observability::PeerState::kSuspect, counts[1]);
    m->SetPeers(observability::PeerState::kDead, counts[2]);
  });
  return Status::OK();
}

// REFT-load, node rebuild and peer copies across nodes (daemon/recovery, docs/recovery.md).
void Daemon::Impl::CreateRecovery() {
  const DaemonConfig& c = config;
  recovery::RecoveryOptions o;
  o.concurrency = c.restore_concurrency;
  o.piece_bytes = c.restore_piece_bytes;
  o.piece_timeout = std::chrono::milliseconds(c.restore_piece_timeout_ms);
  o.restore_timeout = std::chrono::milliseconds(c.restore_timeout_ms);
  o.rebuild_on_restore = c.rebuild_on_restore;
  o.agreement_timeout = std::chrono::milliseconds(c.restore_agreement_timeout_ms);
  o.encode_threads = ChecksumThreads(c);
  restore = std::make_unique<recovery::ReftLoad>(
      store.get(), peer.get(), recovery::RecoveryAgreement::Of(peer->coordinator()), o);
  restore->SetStagedLayers(staged.get());
  copier =
      std::make_unique<recovery::PublishedCopier>(store.get(), peer.get(), peer->coordinator(), o);
  observability::Metrics* m = metrics.get();
  restore->SetObserver([m](const std::string& operation, const Status& st,
                           const recovery::RestoreStats& stats) {
    if (st.ok()) {
      auto secs = [](std::chrono::nanoseconds d) { return std::chrono::duration<double>(d).count(); };
      spdlog::info("{}: {} [agreement {:.3f}s, locate {:.3f}s, fetch {:.3f}s, decode {:.3f}s, "
                   "deliver {:.3f}s, rebuild {:.3f}s, allocate {:.3f}s; {} from peers, {} local]",
                   operation, stats.detail, secs(stats.agreement), secs(stats.locate),
                   secs(stats.fetch), secs(stats.decode), secs(stats.deliver), secs(stats.rebuild),
                   secs(stats.allocate),
                   FormatBytes(stats.bytes_peer), FormatBytes(stats.bytes_local));
      if (!stats.agreement_detail.empty()) {
        spdlog::info("{} agreement: {}", operation, stats.agreement_detail);
      }
      RecordRecovery(m, operation, stats);
    } else {
      spdlog::error("{} failed: {}", operation, st.ToString());
    }
    for (const auto& w : stats.warnings) spdlog::warn("{}: {}", operation, w);
  });

  // The persistent tier (opened lazily: a missing or full directory is reported, never fatal)
  // as the restore fallback and the Persister's target (docs/persist.md, docs/recovery.md).
  persist::PersistOptions po;
  po.dir = c.persist_dir;
  po.node_id = c.node_id;
  po.bandwidth = c.persist_bandwidth;
  po.read_bandwidth = c.persist_read_bandwidth;
  po.keep = c.persist_keep;
  tier = std::make_unique<recovery::TierAccess>(po);
  if (tier->enabled()) restore->SetPersistentTier(tier.get());
  // The job generation survives a daemon restart next to the slots it describes.
  peer->coordinator()->SetStateDir(c.shm_dir + "/commit-state");
  profiles = std::make_unique<replan::PlanProfiles>(c.shm_dir + "/plan-profiles");
  replan::JobPlannerOptions jpo;
  // Validated with the configuration.
  jpo.mode = replan::ParsePlannerMode(c.planner_mode).ValueOr(replan::PlannerMode::kAutomatic);
  jpo.spare_wait = std::chrono::milliseconds(c.planner_spare_wait_ms);
  // A lapsed lease was renewed last a TTL before its departure (its floor: lease_sizing.h may
  // lengthen it in a large cluster). Without etcd there are no leases.
  if (!c.etcd_endpoints.empty()) jpo.lease_ttl = std::chrono::seconds(c.etcd_lease_ttl_s);
  coord::JobCoordinator* job_coordinator = peer->coordinator();
  recovery::ReftLoad* reft_load = restore.get();
  const replan::StepCadence* step_cadence = cadence.get();
  planner = std::make_unique<replan::JobPlanner>(
      c.node_id, jpo, &peer->membership(), replan::PlannerAgreement::Of(job_coordinator),
      profiles.get(),
      [reft_load, job_coordinator, step_cadence](const std::string& job) {
        return replan::ReadJobModel(reft_load, job_coordinator, step_cadence, job);
      });
  planner->SetCommitLog(cadence.get());
  phased_restore = std::make_unique<replan::PhasedRestore>(
      restore.get(), c.node_id, job_coordinator, job_coordinator, hellos.get(),
      [m](const replan::RecoveryPhases& phases) { RecordRecoveryPhases(m, phases); });
  ServeTransferPlans(peer.get(), restore.get(), staged.get(), planner.get(), m,
                     std::chrono::milliseconds(c.restore_timeout_ms));
  peer->coordinator()->AddGenerationListener(
      [](const std::string& job, const coord::JobGeneration& g, int dropped) {
        spdlog::warn("job {} moved to generation {}: restarts from persisted step {} ({} newer "
                     "slot(s) dropped here): {}",
                     job, g.generation, g.base_step.value_or(-1), dropped, g.reason);
      });
  persister::PersisterOptions pso;
  pso.node_id = c.node_id;
  pso.every_steps = c.persist_every_steps;
  pso.commit_hold = std::chrono::milliseconds(c.persist_commit_hold_ms);
  persister = std::make_unique<persister::Persister>(
      store.get(), peer.get(), persister::PersisterAgreement::Of(peer->coordinator()), tier.get(),
      pso);
  // On etcd a persist holds the next commit until every node pinned its step (gossip: none).
  auto* etcd_jobs = dynamic_cast<coord::EtcdJobCoordinator*>(peer->coordinator());
  if (etcd_jobs != nullptr && c.persist_commit_hold_ms > 0) {
    persister->SetCommitHold(&etcd_jobs->persist_hold());
  }
  peer::JobRecords* etcd_records = peer->records();  // null without etcd: no key to write
  persister->SetObserver([m, etcd_records](const persister::NodePersist& n) {
    if (!n.status.ok()) {
      spdlog::error("persist of job {} step {} failed: {} (in-memory snapshots are unaffected)",
                    n.job, n.step, n.status.ToString());
      m->IncPersistFailures(ToMetric(persister::ClassifyPersistFailure(n.status)));
    } else if (n.skipped) {
      spdlog::debug("persist of job {} step {} skipped: {}", n.job, n.step, n.skipped_reason);
    } else {
      // The tier holds a step of the job now: its owner record stays (docs/security.md).
      if (etcd_records != nullptr) {
        if (auto st = etcd_records->NotePersisted(n.job, n.step); !st.ok()) {
          spdlog::warn("job {}: the persisted step {} was not noted in etcd: {}", n.job, n.step,
                       st.ToString());
        }
      }
      spdlog::info("persisted {} rank(s) of job {} step {}: {} in {:.2f}s", n.ranks.size(), n.job,
                   n.step, FormatBytes(n.bytes), n.seconds);
      m->ObservePersist(n.seconds, n.bytes);
    }
    if (!n.retention_error.empty()) spdlog::warn("persist retention: {}", n.retention_error);
  });
}

// Job owners (docs/security.md "Jobs belong to their owner"). On etcd the owner of a job is
// the cluster's record; owners an older reftd kept next to the slots are imported into it
// (once: the file is renamed afterwards). Without etcd the node's journal next to the slots is
// the record, so a restarted reftd that adopts the slots enforces the same owners.
Status Daemon::Impl::OpenJobOwners() {
  const std::string path = config.shm_dir + "/job-owners";
  observability::Metrics* m = metrics.get();
  auto count = [m](const std::string&) { m->IncJobAccessDenied(); };
  auto* cluster = dynamic_cast<coord::EtcdJobOwners*>(peer->owners());
  if (cluster == nullptr) {
    REFT_ASSIGN_OR_RETURN(local_owners, local::JobOwners::Open(path));
    local_owners->SetDeniedObserver(count);
    owners = local_owners.get();
    if (!config.peers.empty()) {
      spdlog::warn("gossip control plane: job owners, rank joins and holders' per-job checks "
                   "are this node's alone (docs/security.md \"Under gossip\"); use etcd on a "
                   "shared cluster");
    }
    return Status::OK();
  }
  cluster->SetDeniedObserver(count);
  owners = cluster;
  REFT_ASSIGN_OR_RETURN(auto legacy, local::JobOwners::Open(path));
  auto recorded = legacy->All();
  if (recorded.ok() && !recorded->empty()) {
    auto imported = cluster->Import(*recorded);
    if (!imported.ok()) {
      // Nobody can claim a job while etcd is unreachable either; the next start imports them.
      spdlog::warn("this node's job owners ({}) were not imported into etcd: {}; reftd imports "
                   "them at its next start", path, imported.status().ToString());
      return Status::OK();
    }
    if (std::rename(path.c_str(), (path + ".imported").c_str()) != 0) {
      spdlog::warn("cannot rename {} after importing it: {}", path, std::strerror(errno));
    }
  }
  return Status::OK();
}

Status Daemon::Impl::StartLocalChannel() {
  REFT_RETURN_NOT_OK(OpenJobOwners());
  // Known only now (CreateRecovery ran first), and before any restore or persist: manifests
  // record the owner, a tier restore checks it (docs/security.md "Jobs belong to their owner").
  restore->SetJobOwnership(owners);
  persister->SetJobOwnership(owners);
  local::LocalServerOptions options = MakeLocalOptions(config);
  options.job_owners = owners;
  options.node_id = config.node_id;
  failure_reports = std::make_unique<JobFailureReports>(
      peer->coordinator(), peer->coordinator(), &peer->membership(), JobFailureReports::Limits{});
  REFT_ASSIGN_OR_RETURN(
      local_server, local::LocalServer::Create(
                        options, store.get(), coordinator.get(),
                        local::ClusterHooks{copier.get(), phased_restore.get(), planner.get(),
                                            failure_reports.get()}));
  return local_server->Start();  // refuses a socket a live reftd serves
}

// Job records (docs/operations.md "Job records"): on etcd the cluster's, swept by the node
// holding the sweeper key; without etcd (one node, gossip) this node's own, swept here.
Status Daemon::Impl::StartJobRecords() {
  records = peer->records();
  if (records != nullptr || local_owners == nullptr) return Status::OK();
  LocalJobRecordsOptions o;
  o.forget_after = std::chrono::seconds(config.jobs_forget_after_s);
  o.node_id = config.node_id;
  const local::LocalServer* server = local_server.get();
  local_records = std::make_unique<LocalJobRecords>(
      local_owners.get(), store.get(), [server] { return server->Sessions(); }, tier.get(), o);
  records = local_records.get();
  return local_records->Start();
}

Status Daemon::Impl::StartGrpc() {
  const DaemonConfig& c = config;
  REFT_ASSIGN_OR_RETURN(auto credentials, security::MakeServerCredentials(c.security));
  const local::LocalServer* server = local_server.get();
  admin = std::make_unique<AdminService>(
      config, store.get(), [server] { return ListSessions(server); }, auth.get(),
      &peer->membership(),
      AdminRecovery{restore.get(), persister.get(), tier.get(), peer->coordinator(), peer->coordinator(),
                    owners, peer->access(), records, cadence.get(), profiles.get(),
                    planner.get()});
  grpc::EnableDefaultHealthCheckService(true);
  grpc::ServerBuilder builder;
  int bound_port = 0;
  builder.AddListeningPort(c.listen, credentials, &bound_port);
  builder.SetMaxReceiveMessageSize(static_cast<int>(c.max_grpc_message_bytes));
  builder.SetMaxSendMessageSize(static_cast<int>(c.max_grpc_message_bytes));
  builder.RegisterService(admin.get());
  peer->Register(&builder);
  grpc_server = builder.BuildAndStart();
  if (!grpc_server || bound_port == 0) {
    return Status::Unavailable("cannot listen on " + c.listen + " (address in use or invalid)");
  }
  // reftctl --socket reaches Admin over the admin socket next to the local channel's; its
  // connections join the same server once their uid is known.
  admin_socket->Serve(grpc_server.get());
  // "--listen HOST:0" lets the kernel pick the port: peers are told the one it picked.
  serving = c.listen.substr(0, c.listen.rfind(':') + 1) + std::to_string(bound_port);
  return peer->Start(c.advertise.empty() ? serving : "");
}

void Daemon::Shutdown() {
  if (impl_->metrics) impl_->metrics->SetRefreshHook({});  // reads what goes down below
  if (impl_->local_records) impl_->local_records->Stop();  // reads the sessions and the store
  // Trainers first: their in-flight copies finish or are aborted before the store goes away.
  if (impl_->local_server) {
    impl_->local_server->Stop();
    impl_->local_server.reset();
  }
  if (impl_->persister) impl_->persister->Stop();  // no new persists; a running one finishes
  if (impl_->planner) impl_->planner->Stop();      // before the coordinator it publishes through
  if (impl_->peer) impl_->peer->Stop();  // no more probes or commit exchanges
  if (impl_->admin_socket) impl_->admin_socket->Stop();  // no new admin connections
  if (impl_->grpc_server) {
    impl_->grpc_server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
    impl_->grpc_server->Wait();
    impl_->grpc_server.reset();
  }
  impl_->admin.reset();
  impl_->auth.reset();
  impl_->admin_socket.reset();
  impl_->persister.reset();
  impl_->planner.reset();
  impl_->copier.reset();
  impl_->phased_restore.reset();
  impl_->restore.reset();
  impl_->tier.reset();
  impl_->coordinator.reset();
  impl_->peer.reset();
  impl_->metrics.reset();  // stops scrapes (and the refresh hook) before the store goes
  impl_->store.reset();
}

}  // namespace reft::app
