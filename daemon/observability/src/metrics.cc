#include "reft/observability/metrics.h"

#include <prometheus/collectable.h>
#include <prometheus/counter.h>
#include <prometheus/exposer.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>

#include <exception>
#include <vector>

namespace reft::observability {
namespace {

using prometheus::BuildCounter;
using prometheus::BuildGauge;
using prometheus::BuildHistogram;
using Buckets = prometheus::Histogram::BucketBoundaries;

// Bucket layouts, chosen for the expected range of each quantity (docs/metrics.md).
// The trainer should block for milliseconds; anything near a second is an incident.
const Buckets kBlockedBuckets = {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
                                 0.1,    0.25,  0.5,    1,     2.5,  5,     10};
// Commit waits for every rank and for protection: up to minutes on a slow job.
const Buckets kCommitBuckets = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
                                1,     2.5,  5,     10,   30,  60,   120};
// Restore/rebuild phases move gigabytes: sub-second to tens of minutes.
const Buckets kPhaseBuckets = {0.01, 0.05, 0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800};
// A persist writes gigabytes at a configured bandwidth: seconds to an hour.
const Buckets kPersistBuckets = {0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600};
// Gossip is a small RPC on the cluster network.
const Buckets kGossipBuckets = {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005,
                                0.01,   0.025,   0.05,   0.1,   0.25,   1};

}  // namespace

const char* ToString(RecoverySource source) {
  switch (source) {
    case RecoverySource::kLocal: return "local";
    case RecoverySource::kPeer: return "peer";
    case RecoverySource::kReplica: return "replica";
    case RecoverySource::kParity: return "parity";
    case RecoverySource::kPersistent: return "persistent";
    case RecoverySource::kCount: break;
  }
  return "unknown";
}

const char* ToString(RecoveryOperation operation) {
  switch (operation) {
    case RecoveryOperation::kRestore: return "restore";
    case RecoveryOperation::kRebuild: return "rebuild";
    case RecoveryOperation::kCount: break;
  }
  return "unknown";
}

const char* ToString(LossPhase phase) {
  switch (phase) {
    case LossPhase::kDetect: return "detect";
    case LossPhase::kDecide: return "decide";
    case LossPhase::kStage: return "stage";
    case LossPhase::kReconnect: return "reconnect";
    case LossPhase::kRestore: return "restore";
    case LossPhase::kCount: break;
  }
  return "?";
}

const char* ToString(RecoveryPhase phase) {
  switch (phase) {
    case RecoveryPhase::kLocate: return "locate";
    case RecoveryPhase::kFetch: return "fetch";
    case RecoveryPhase::kDecode: return "decode";
    case RecoveryPhase::kDeliver: return "deliver";
    case RecoveryPhase::kRebuild: return "rebuild";
    case RecoveryPhase::kCount: break;
  }
  return "unknown";
}

const char* ToString(PeerState state) {
  switch (state) {
    case PeerState::kAlive: return "alive";
    case PeerState::kSuspect: return "suspect";
    case PeerState::kDead: return "dead";
    case PeerState::kLeft: return "left";
    case PeerState::kCount: break;
  }
  return "unknown";
}

const char* ToString(PersistFailure reason) {
  switch (reason) {
    case PersistFailure::kMissingDir: return "missing_dir";
    case PersistFailure::kNoSpace: return "no_space";
    case PersistFailure::kPermission: return "permission";
    case PersistFailure::kIo: return "io";
    case PersistFailure::kOther: return "other";
    case PersistFailure::kCount: break;
  }
  return "unknown";
}

const char* ToString(RefusedAt endpoint) {
  switch (endpoint) {
    case RefusedAt::kGrpc: return "grpc";
    case RefusedAt::kBulkPort: return "bulk_port";
    case RefusedAt::kCount: break;
  }
  return "unknown";
}

// The exposer collects this instead of the registry, so the refresh hook runs per scrape.
class Metrics::Refreshing : public prometheus::Collectable {
 public:
  explicit Refreshing(const Metrics* owner) : owner_(owner) {}
  std::vector<prometheus::MetricFamily> Collect() const override {
    owner_->RunRefreshHook();
    return owner_->registry_->Collect();
  }

 private:
  const Metrics* owner_;
};

Metrics::Metrics()
    : registry_(std::make_shared<prometheus::Registry>()),
      refreshing_(std::make_shared<Refreshing>(this)) {
  auto& r = *registry_;
  snapshot_bytes_ = &BuildCounter()
                         .Name("reft_snapshot_bytes_total")
                         .Help("Bytes copied into host memory by snapshots; rate() is bytes/s")
                         .Register(r)
                         .Add({});
  snapshots_ = &BuildCounter()
                    .Name("reft_snapshots_total")
                    .Help("Snapshots taken (one per rank and step)")
                    .Register(r)
                    .Add({});
  trainer_blocked_ = &BuildHistogram()
                          .Name("reft_trainer_blocked_seconds")
                          .Help("Time a trainer call to snapshot() was blocked")
                          .Register(r)
                          .Add({}, kBlockedBuckets);
  commit_latency_ = &BuildHistogram()
                         .Name("reft_commit_latency_seconds")
                         .Help("From snapshot start to the step being committed job-wide")
                         .Register(r)
                         .Add({}, kCommitBuckets);
  slots_ = &BuildGauge().Name("reft_slots").Help("Snapshot slots allocated").Register(r).Add({});
  memory_used_ = &BuildGauge()
                      .Name("reft_memory_used_bytes")
                      .Help("Host memory held by snapshot segments")
                      .Register(r)
                      .Add({});
  memory_limit_ = &BuildGauge()
                       .Name("reft_memory_limit_bytes")
                       .Help("Configured memory_limit; 0 means unlimited")
                       .Register(r)
                       .Add({});
  auto& phases = BuildHistogram()
                     .Name("reft_recovery_phase_duration_seconds")
                     .Help("Duration of each phase of a restore or rebuild")
                     .Register(r);
  for (int op = 0; op < static_cast<int>(RecoveryOperation::kCount); ++op) {
    for (int ph = 0; ph < static_cast<int>(RecoveryPhase::kCount); ++ph) {
      phase_[op][ph] = &phases.Add({{"operation", ToString(static_cast<RecoveryOperation>(op))},
                                    {"phase", ToString(static_cast<RecoveryPhase>(ph))}},
                                   kPhaseBuckets);
    }
  }
  auto& loss_phases = BuildHistogram()
                          .Name("reft_recovery_phase_seconds")
                          .Help("Duration of each phase of a recovery, from the phase before it")
                          .Register(r);
  for (int ph = 0; ph < static_cast<int>(LossPhase::kCount); ++ph) {
    loss_phase_[ph] = &loss_phases.Add({{"phase", ToString(static_cast<LossPhase>(ph))}}, kPhaseBuckets);
  }
  auto& recovered = BuildCounter()
                        .Name("reft_recovered_bytes_total")
                        .Help("Bytes recovered by restore or rebuild, by source")
                        .Register(r);
  for (int s = 0; s < static_cast<int>(RecoverySource::kCount); ++s) {
    recovered_[s] = &recovered.Add({{"source", ToString(static_cast<RecoverySource>(s))}});
  }
  checksum_failures_ = &BuildCounter()
                            .Name("reft_checksum_failures_total")
                            .Help("Chunks whose checksum did not match (must stay 0)")
                            .Register(r)
                            .Add({});
  job_access_denied_ = &BuildCounter()
                            .Name("reft_job_access_denied_total")
                            .Help("Sessions and Admin calls on a job refused because the caller "
                                  "is not the job's owner")
                            .Register(r)
                            .Add({});
  repaired_faults_ = &BuildCounter()
                          .Name("reft_client_mapping_faults_total")
                          .Help("Accesses to a slot file a client truncated under reftd, "
                                "repaired instead of crashing (the slot is then corrupt)")
                          .Register(r)
                          .Add({});
  auto& refused = BuildCounter()
                      .Name("reft_refused_total")
                      .Help("Calls and connections turned away for lack of credentials, by "
                            "endpoint")
                      .Register(r);
  for (int e = 0; e < static_cast<int>(RefusedAt::kCount); ++e) {
    refused_[e] = &refused.Add({{"endpoint", ToString(static_cast<RefusedAt>(e))}});
  }
  bulk_connections_ = &BuildCounter()
                           .Name("reft_bulk_connections_total")
                           .Help("FetchRegion transfers this node served on a bulk connection")
                           .Register(r)
                           .Add({});
  auto& peer_copy = BuildCounter()
                        .Name("reft_peer_copy_bytes_total")
                        .Help("Bytes of ring neighbours' unique and sharded buffers copied "
                              "into this node's slots before a seal, read here or pulled from "
                              "other nodes")
                        .Register(r);
  peer_copy_bytes_[0] = &peer_copy.Add({{"source", "local"}});
  peer_copy_bytes_[1] = &peer_copy.Add({{"source", "remote"}});
  jobs_followed_ = &BuildGauge()
                       .Name("reft_jobs_followed")
                       .Help("Jobs this node keeps control-plane state and watches for (bounded "
                             "by the jobs in use here, not by the names ever seen)")
                       .Register(r)
                       .Add({});
  commit_held_seconds_ = &BuildCounter()
                             .Name("reft_commit_held_seconds_total")
                             .Help("Time this node, as a job's commit coordinator, held a "
                                   "commit for a persist until every node pinned the step")
                             .Register(r)
                             .Add({});
  commit_hold_timeouts_ = &BuildCounter()
                              .Name("reft_commit_hold_timeouts_total")
                              .Help("Persist holds that ran out before every node pinned the "
                                    "step (the commit went on; the persist failed there)")
                              .Register(r)
                              .Add({});
  control_plane_suspect_ = &BuildGauge()
                                .Name("reft_control_plane_suspect")
                                .Help("1 while this node suspects the control plane (leases "
                                      "lapsing in bulk, etcd slow or changing leader) and holds "
                                      "lease lapses for confirmation")
                                .Register(r)
                                .Add({});
  deaths_held_ = &BuildGauge()
                      .Name("reft_deaths_held")
                      .Help("Nodes whose lease lapsed and whose death is not confirmed yet")
                      .Register(r)
                      .Add({});
  auto& holds = BuildCounter()
                    .Name("reft_deaths_held_total")
                    .Help("Lease lapses held for confirmation, by outcome (held: every one; "
                          "released: the node registered again; declared: confirmed dead)")
                    .Register(r);
  death_holds_ = {&holds.Add({{"outcome", "held"}}), &holds.Add({{"outcome", "released"}}),
                  &holds.Add({{"outcome", "declared"}})};
  reregistrations_ = &BuildCounter()
                          .Name("reft_node_reregistrations_total")
                          .Help("Times this node registered again after its lease lapsed")
                          .Register(r)
                          .Add({});
  auto& suspicions = BuildCounter()
                         .Name("reft_node_suspicions_total")
                         .Help("Suspicions that a node died (trainers' failure reports, peer "
                               "calls that found it unreachable), by outcome: received; "
                               "confirmed (its port refused twice: lease revoked); refuted (its "
                               "port accepted); unresolved (no answer: left to its lease); "
                               "dropped (too many at once)")
                         .Register(r);
  for (const char* outcome : {"received", "confirmed", "refuted", "unresolved", "dropped"}) {
    suspicions_.push_back(&suspicions.Add({{"outcome", outcome}}));
  }
  deaths_declared_ = &BuildCounter()
                         .Name("reft_node_deaths_declared_total")
                         .Help("Node departures this node declared (a lease lapse heard as a "
                               "death, at once or after a hold): what starts recoveries")
                         .Register(r)
                         .Add({});
  staged_ = &BuildGauge()
                 .Name("reft_plan_staged_bytes")
                 .Help("Bytes of layers a transfer plan staged on this node for reshaped restores")
                 .Register(r)
                 .Add({});
  staged_total_ = &BuildCounter()
                       .Name("reft_plan_staged_bytes_total")
                       .Help("Bytes of layers this node staged for transfer plans")
                       .Register(r)
                       .Add({});
  auto& hosts = BuildCounter()
                    .Name("reft_plan_transfer_hosts_total")
                    .Help("Nodes this node, as the job's coordinator, asked to stage what they lack of a transfer plan, by result")
                    .Register(r);
  transfer_hosts_[0] = &hosts.Add({{"result", "failed"}});
  transfer_hosts_[1] = &hosts.Add({{"result", "done"}});
  auto& peers = BuildGauge().Name("reft_peers").Help("Peers known to this node, by state").Register(r);
  for (int s = 0; s < static_cast<int>(PeerState::kCount); ++s) {
    peers_[s] = &peers.Add({{"state", ToString(static_cast<PeerState>(s))}});
  }
  persist_duration_ = &BuildHistogram()
                           .Name("reft_persist_duration_seconds")
                           .Help("Wall time of writing this node's ranks of one step to the "
                                 "persistent tier")
                           .Register(r)
                           .Add({}, kPersistBuckets);
  persist_bytes_ = &BuildCounter()
                        .Name("reft_persist_bytes_total")
                        .Help("Bytes written to the persistent tier (rank files and manifests)")
                        .Register(r)
                        .Add({});
  auto& persist_failures = BuildCounter()
                               .Name("reft_persist_failures_total")
                               .Help("Failed persists of this node's ranks, by reason")
                               .Register(r);
  for (int f = 0; f < static_cast<int>(PersistFailure::kCount); ++f) {
    persist_failures_[f] =
        &persist_failures.Add({{"reason", ToString(static_cast<PersistFailure>(f))}});
  }
  gossip_rtt_ = &BuildHistogram()
                     .Name("reft_gossip_round_trip_seconds")
                     .Help("Round-trip time of one gossip exchange with a peer")
                     .Register(r)
                     .Add({}, kGossipBuckets);
}

// Stop the exposer before any member goes away, so no scrape runs into a half-destroyed
// object.
Metrics::~Metrics() { exposer_.reset(); }

Result<std::unique_ptr<Metrics>> Metrics::Create(const std::string& listen_address) {
  std::unique_ptr<Metrics> m(new Metrics());
  if (listen_address.empty()) return m;
  try {
    // One worker thread: scrapes are rare and small.
    m->exposer_ = std::make_unique<prometheus::Exposer>(listen_address, 1);
  } catch (const std::exception& e) {
    return Status::InvalidArgument("config key 'metrics_listen': cannot listen on '" +
                                   listen_address + "': " + e.what());
  }
  m->exposer_->RegisterCollectable(m->refreshing_);
  auto ports = m->exposer_->GetListeningPorts();
  if (ports.empty()) {
    return Status::InvalidArgument("config key 'metrics_listen': no port bound for '" +
                                   listen_address + "'");
  }
  m->port_ = ports.front();
  return m;
}

std::string Metrics::Serialize() const {
  return prometheus::TextSerializer().Serialize(refreshing_->Collect());
}

void Metrics::SetRefreshHook(std::function<void(Metrics&)> hook) {
  MutexLock lock(hook_mu_);
  hook_ = std::move(hook);
}

void Metrics::RunRefreshHook() const {
  // Held while the hook runs: SetRefreshHook() cannot swap it out mid-call, and concurrent
  // scrapes run the hook one at a time.
  MutexLock lock(hook_mu_);
  if (hook_) hook_(const_cast<Metrics&>(*this));
}

void Metrics::RecordSnapshot(uint64_t bytes) {
  snapshot_bytes_->Increment(static_cast<double>(bytes));
  snapshots_->Increment();
}
void Metrics::ObserveTrainerBlocked(double seconds) { trainer_blocked_->Observe(seconds); }
void Metrics::ObserveCommitLatency(double seconds) { commit_latency_->Observe(seconds); }
void Metrics::SetSlots(double slots) { slots_->Set(slots); }
void Metrics::SetMemoryUsed(double bytes) { memory_used_->Set(bytes); }
void Metrics::SetMemoryLimit(double bytes) { memory_limit_->Set(bytes); }

void Metrics::ObserveRecoveryPhase(RecoveryOperation operation, RecoveryPhase phase,
                                   double seconds) {
  phase_[static_cast<int>(operation)][static_cast<int>(phase)]->Observe(seconds);
}
void Metrics::ObserveLossPhase(LossPhase phase, double seconds) {
  loss_phase_[static_cast<int>(phase)]->Observe(seconds);
}
void Metrics::AddBytesRecovered(RecoverySource source, uint64_t bytes) {
  recovered_[static_cast<int>(source)]->Increment(static_cast<double>(bytes));
}
void Metrics::IncChecksumFailures(uint64_t n) {
  checksum_failures_->Increment(static_cast<double>(n));
}
void Metrics::IncJobAccessDenied() { job_access_denied_->Increment(); }

void Metrics::SetStagedBytes(double bytes) { staged_->Set(bytes); }

void Metrics::SetJobsFollowed(double jobs) { jobs_followed_->Set(jobs); }

void Metrics::AddStagedBytes(uint64_t bytes) { staged_total_->Increment(static_cast<double>(bytes)); }

void Metrics::IncTransferHosts(bool ok) {
  transfer_hosts_[ok ? 1 : 0]->Increment();
}
namespace {
// A counter that mirrors a total kept elsewhere (read at each scrape).
void Follow(prometheus::Counter* counter, uint64_t total) {
  const double now = static_cast<double>(total);
  if (now > counter->Value()) counter->Increment(now - counter->Value());
}
}  // namespace

void Metrics::SetRepairedFaults(uint64_t total) { Follow(repaired_faults_, total); }
void Metrics::SetCommitHolds(double held_seconds_total, uint64_t timeouts_total) {
  if (held_seconds_total > commit_held_seconds_->Value()) {
    commit_held_seconds_->Increment(held_seconds_total - commit_held_seconds_->Value());
  }
  Follow(commit_hold_timeouts_, timeouts_total);
}
void Metrics::SetDeathHolds(bool suspect, double held, uint64_t held_total,
                            uint64_t released_total, uint64_t declared_total,
                            uint64_t reregistrations_total) {
  control_plane_suspect_->Set(suspect ? 1 : 0);
  deaths_held_->Set(held);
  Follow(death_holds_[0], held_total);
  Follow(death_holds_[1], released_total);
  Follow(death_holds_[2], declared_total);
  Follow(reregistrations_, reregistrations_total);
}
void Metrics::SetDeathsDeclared(uint64_t total) { Follow(deaths_declared_, total); }
void Metrics::SetSuspicions(uint64_t received, uint64_t confirmed, uint64_t refuted,
                            uint64_t unresolved, uint64_t dropped) {
  const uint64_t totals[] = {received, confirmed, refuted, unresolved, dropped};
  for (size_t i = 0; i < suspicions_.size(); ++i) Follow(suspicions_[i], totals[i]);
}
void Metrics::SetRefused(RefusedAt endpoint, uint64_t total) {
  Follow(refused_[static_cast<int>(endpoint)], total);
}
void Metrics::SetBulkConnections(uint64_t total) { Follow(bulk_connections_, total); }
void Metrics::SetPeerCopyBytes(uint64_t local_total, uint64_t remote_total) {
  Follow(peer_copy_bytes_[0], local_total);
  Follow(peer_copy_bytes_[1], remote_total);
}
void Metrics::SetPeers(PeerState state, double count) {
  peers_[static_cast<int>(state)]->Set(count);
}
void Metrics::ObserveGossipRoundTrip(double seconds) { gossip_rtt_->Observe(seconds); }
void Metrics::ObservePersist(double seconds, uint64_t bytes) {
  persist_duration_->Observe(seconds);
  persist_bytes_->Increment(static_cast<double>(bytes));
}
void Metrics::IncPersistFailures(PersistFailure reason) {
  persist_failures_[static_cast<int>(reason)]->Increment();
}

}  // namespace reft::observability
