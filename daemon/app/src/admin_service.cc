#include "admin_service.h"

#include <algorithm>
#include <map>
#include <set>

#include <spdlog/spdlog.h>

#include "etcd_credentials.h"
#include "reft/replan/job_model.h"
#include "reft/kernels/device.h"
#include "reft/mutex.h"
#include "reft/peer/rank_id.h"
#include "reft/proto/grpc_status.h"
#include "reft/recovery/tier_restore.h"
#include "reft/v1/common.pb.h"

namespace reft::app {
namespace {

constexpr uint32_t kProtocolVersion = 1;
constexpr size_t kMaxJobName = 64;
// How long Status may spend on etcd: a stopped or partitioned etcd is reported, not waited for.
constexpr std::chrono::milliseconds kControlPlaneBudget{1500};

reft::Status CheckJobName(const std::string& job) {
  if (job.empty()) return reft::Status::InvalidArgument("job must not be empty");
  if (job.size() > kMaxJobName) return reft::Status::InvalidArgument("job name longer than 64 bytes");
  return reft::Status::OK();
}

// The job's layout as the commit coordinator knows it (joined here or learned from a peer).
std::optional<JobLayout> KnownLayout(coord::JobTimeline* timeline,
                                     const std::string& job) {
  if (timeline == nullptr) return std::nullopt;
  return timeline->Layout(job);
}

v1::ErrorCode ToErrorCode(StatusCode code) {
  return static_cast<v1::ErrorCode>(code);  // common.proto mirrors StatusCode one to one
}

// Writes the events of one server-streaming call: progress callbacks may come from fetch
// workers or per-node threads, so writes are serialised; progress is thinned to one event per
// 100 ms (plus the last of a phase), the result always goes out.
template <typename Event>
class EventStream {
 public:
  explicit EventStream(grpc::ServerWriter<Event>* writer) : writer_(writer) {}

  void Progress(const std::string& phase, uint64_t done, uint64_t total, const std::string& unit,
                const std::string& message) {
    MutexLock lock(mu_);
    const auto now = std::chrono::steady_clock::now();
    if (phase == phase_ && done != total && now - last_ < std::chrono::milliseconds(100)) return;
    phase_ = phase;
    last_ = now;
    Event e;
    auto* p = e.mutable_progress();
    p->set_phase(phase);
    p->set_done(done);
    p->set_total(total);
    p->set_unit(unit);
    p->set_message(message);
    (void)writer_->Write(e);  // a client that went away only loses progress
  }

  void Result(const Event& e) {
    MutexLock lock(mu_);
    (void)writer_->Write(e);
  }

 private:
  grpc::ServerWriter<Event>* const writer_;
  Mutex mu_;  // serialises the writes; guards the progress thinning
  std::string phase_ REFT_GUARDED_BY(mu_);
  std::chrono::steady_clock::time_point last_ REFT_GUARDED_BY(mu_){};
};

}  // namespace

AdminService::AdminService(const DaemonConfig& config, store::SnapshotStore* store,
                           SessionLister sessions, const security::Authorizer* auth,
                           const peer::NodeDirectory* membership, AdminRecovery recovery)
    : config_(config),
      store_(store),
      sessions_(std::move(sessions)),
      auth_(auth),
      membership_(membership),
      recovery_(recovery),
      started_(std::chrono::steady_clock::now()) {
  if (config_.etcd_endpoints.empty()) return;
  auto credentials = MakeEtcdCredentials(config_);
  if (!credentials.ok()) {
    etcd_probe_error_ = "cannot probe etcd: " + credentials.status().ToString();
    return;
  }
  etcd_probe_ = std::make_unique<coord::EtcdProbe>(config_.etcd_endpoints, *credentials);
}

int64_t AdminService::NewestCommittedStep(store::SnapshotStore* store, const std::string& job) {
  int64_t newest = -1;
  bool first = true;
  for (const auto& rank : store->Ranks(job)) {
    auto step = store->NewestCommitted(rank);
    int64_t s = step.value_or(-1);
    newest = first ? s : std::min(newest, s);
    first = false;
  }
  return newest;
}

grpc::Status AdminService::Status(grpc::ServerContext* ctx, const v1::StatusRequest*,
                                  v1::StatusResponse* resp) {
  if (auto denied = auth_->CheckAdmin(ctx, "Admin/Status"); !denied.ok()) return denied;
  resp->set_node_id(config_.node_id);
  resp->set_health("serving");
  auto* build = resp->mutable_build();
  build->set_version(REFT_VERSION);
  build->set_protocol_version(kProtocolVersion);
  for (auto kind : kernels::BuiltDeviceKinds()) build->add_device_kinds(kernels::MemoryKindName(kind));
  auto usage = store_->Usage();
  resp->set_memory_used(usage.used);
  resp->set_memory_limit(usage.limit);
  resp->set_slots(usage.slots);
  std::map<std::string, uint32_t> ranks_per_job;
  for (const auto& rank : store_->Ranks()) ranks_per_job[rank.job]++;
  std::vector<std::string> jobs;
  for (const auto& [job, ranks] : ranks_per_job) jobs.push_back(job);
  std::map<std::string, std::string> coordinators;
  // Owners and members live in etcd too: not asked while it is unreachable (each ask would
  // wait for it).
  const bool reachable = FillControlPlane(jobs, resp->mutable_control_plane(), &coordinators);
  for (const auto& [job, ranks] : ranks_per_job) {
    auto* js = resp->add_jobs();
    js->set_job(job);
    js->set_ranks(ranks);
    js->set_newest_committed_step(NewestCommittedStep(store_, job));
    if (recovery_.timeline) js->set_generation(recovery_.timeline->Generation(job).generation);
    if (auto c = coordinators.find(job); c != coordinators.end()) js->set_coordinator(c->second);
    auto owner = recovery_.owners && reachable
                     ? recovery_.owners->Owner(job)
                     : Result<std::optional<local::JobOwner>>(std::nullopt);
    if (owner.ok() && owner->has_value()) {
      auto* o = js->mutable_owner();
      o->set_uid((*owner)->uid);
      o->set_has_gid((*owner)->gid.has_value());
      o->set_gid((*owner)->gid.value_or(0));
      o->set_group((*owner)->group);
    }
  }
  FillPersistStatus(resp->mutable_persist());
  if (sessions_) {
    for (auto& s : sessions_()) *resp->add_sessions() = std::move(s);
  }
  if (reachable) {
    for (const auto& m : membership_->LiveMembers()) resp->add_peers(m.address);
  }
  resp->set_listen(config_.listen);
  resp->set_socket(config_.socket);
  resp->set_shm_dir(config_.shm_dir);
  resp->set_uptime_seconds(std::chrono::duration_cast<std::chrono::seconds>(
                               std::chrono::steady_clock::now() - started_)
                               .count());
  return grpc::Status::OK;
}

void AdminService::FillDeathHolds(const peer::DeathHoldStatus& d, v1::DeathHolds* out) {
  out->set_suspect(d.suspect);
  if (d.suspect) {
    out->set_since_unix_ms(std::chrono::duration_cast<std::chrono::milliseconds>(
                               d.since.time_since_epoch())
                               .count());
    out->set_reason(d.reason);
  }
  for (const auto& node : d.held) out->add_held(node);
  out->set_held_total(d.held_total);
  out->set_released_total(d.released_total);
  out->set_declared_total(d.declared_total);
  out->set_reregistrations_total(d.reregistrations_total);
  out->set_deaths_declared_total(d.deaths_declared_total);
}

bool AdminService::FillControlPlane(const std::vector<std::string>& jobs,
                                    v1::ControlPlaneStatus* out,
                                    std::map<std::string, std::string>* coordinators) const {
  if (config_.etcd_endpoints.empty()) {
    // Gossip among the peers (none of them coordinates a job: every node decides from its own
    // view), or one node alone.
    const bool peers = !config_.peers.empty() || !membership_->LiveMembers().empty();
    out->set_kind(peers ? "gossip" : "none");
    return true;
  }
  out->set_kind("etcd");
  FillDeathHolds(membership_->DeathHolds(), out->mutable_deaths());
  if (etcd_probe_ == nullptr) {
    for (const auto& e : config_.etcd_endpoints) out->add_endpoints()->set_address(e);
    out->set_error(etcd_probe_error_);
    return false;
  }
  coord::EtcdHealth h = etcd_probe_->Probe(jobs, kControlPlaneBudget);
  bool reachable = false;
  for (const auto& m : h.members) {
    auto* e = out->add_endpoints();
    e->set_address(m.address);
    e->set_healthy(m.healthy);
    e->set_leader(m.leader);
    e->set_error(m.error);
    reachable |= m.healthy;
  }
  out->set_error(h.error);
  *coordinators = std::move(h.coordinators);
  return reachable;
}

grpc::Status AdminService::CheckJobCall(grpc::ServerContext* ctx, const char* method,
                                        const std::string& job) const {
  // Operators only; the refusal names nothing of the job (its owner is no stranger's business).
  grpc::Status denied = auth_->CheckAdmin(ctx, method);
  if (!denied.ok() && recovery_.owners != nullptr) recovery_.owners->NoteDenied(job);
  return denied;
}

grpc::Status AdminService::ListSnapshots(grpc::ServerContext* ctx,
                                         const v1::ListSnapshotsRequest* req,
                                         v1::ListSnapshotsResponse* resp) {
  if (auto denied = auth_->CheckAdmin(ctx, "Admin/ListSnapshots"); !denied.ok()) return denied;
  std::optional<std::string> job;
  if (!req->job().empty()) {
    if (auto st = CheckJobName(req->job()); !st.ok()) return proto::ToGrpc(st, ctx);
    job = req->job();
  }
  for (const auto& slot : store_->List(job)) {
    auto* d = resp->add_snapshots();
    peer::ToRankId(slot.rank, d->mutable_rank());
    d->set_slot(slot.index);
    d->set_state(store::SlotStateName(slot.state));
    d->set_step(slot.step);
    d->set_payload_bytes(slot.payload_bytes);
    d->set_segment_bytes(slot.segment_bytes);
    for (const auto& r : slot.regions) {
      auto* region = d->add_regions();
      region->set_name(r.name);
      region->set_size(r.size);
    }
  }
  return grpc::Status::OK;
}

grpc::Status AdminService::VerifySnapshot(grpc::ServerContext* ctx,
                                          const v1::VerifySnapshotRequest* req,
                                          v1::VerifySnapshotResponse* resp) {
  if (auto denied = auth_->CheckAdmin(ctx, "Admin/VerifySnapshot"); !denied.ok()) return denied;
  if (auto st = CheckJobName(req->job()); !st.ok()) return proto::ToGrpc(st, ctx);
  auto ranks = store_->Ranks(req->job());
  if (ranks.empty()) {
    return proto::ToGrpc(
        reft::Status::NotFound("no snapshots of job '" + req->job() + "' on this node"), ctx);
  }
  int64_t step = req->has_step() ? req->step() : NewestCommittedStep(store_, req->job());
  if (step < 0) {
    return proto::ToGrpc(reft::Status::NotFound("job '" + req->job() + "' has no committed step"),
                         ctx);
  }
  resp->set_job(req->job());
  resp->set_step(step);
  uint32_t checked = 0;
  uint64_t chunks = 0;
  for (const auto& rank : ranks) {
    auto report = store_->Verify(rank, step);
    if (report.status().code() == StatusCode::kNotFound) continue;
    if (!report.ok()) return proto::ToGrpc(report.status(), ctx);
    ++checked;
    chunks += report->chunks_checked;
    for (const auto& bad : report->bad) {
      auto* b = resp->add_bad();
      peer::ToRankId(rank, b->mutable_rank());
      b->set_region(bad.region);
      b->set_chunk(bad.chunk);
      b->set_offset(bad.offset);
    }
  }
  if (checked == 0) {
    return proto::ToGrpc(reft::Status::NotFound("job '" + req->job() + "' has no step " +
                                                std::to_string(step) + " on this node"),
                         ctx);
  }
  resp->set_ranks_checked(checked);
  resp->set_chunks_checked(chunks);
  resp->set_ok(resp->bad_size() == 0);
  return grpc::Status::OK;
}

grpc::Status AdminService::DropSnapshot(grpc::ServerContext* ctx,
                                        const v1::DropSnapshotRequest* req,
                                        v1::DropSnapshotResponse* resp) {
  if (auto denied = CheckJobCall(ctx, "Admin/DropSnapshot", req->job()); !denied.ok()) {
    return denied;
  }
  if (auto st = CheckJobName(req->job()); !st.ok()) return proto::ToGrpc(st, ctx);
  if (!req->force() && req->step() == NewestCommittedStep(store_, req->job())) {
    return proto::ToGrpc(
        Status::InvalidArgument("step " + std::to_string(req->step()) +
                                " is the newest committed snapshot of job '" + req->job() +
                                "'; dropping it loses the restorable state (use "
                                "--force)"),
        ctx);
  }
  uint32_t freed = 0;
  for (const auto& slot : store_->List(req->job())) {
    if (slot.step == req->step()) ++freed;
  }
  if (auto st = store_->Drop(req->job(), req->step()); !st.ok()) return proto::ToGrpc(st, ctx);
  resp->set_slots_freed(freed);
  return grpc::Status::OK;
}

grpc::Status AdminService::ListNodes(grpc::ServerContext* ctx, const v1::ListNodesRequest*,
                                    v1::ListNodesResponse* resp) {
  if (auto denied = auth_->CheckAdmin(ctx, "Admin/ListNodes"); !denied.ok()) return denied;
  for (const auto& m : membership_->Members()) {
    auto* n = resp->add_nodes();
    n->set_node_id(m.node_id);
    n->set_address(m.address);
    n->set_state(peer::MemberStateName(m.state));
    n->set_epoch(m.epoch);
    n->set_incarnation(m.incarnation);
    n->set_self(m.self);
  }
  return grpc::Status::OK;
}

void AdminService::FillPersistStatus(v1::PersistTierStatus* out) {
  out->set_every_steps(config_.persist_every_steps);
  out->set_dir(config_.persist_dir);
  out->set_enabled(!config_.persist_dir.empty());
  recovery::TierAccess* tier = recovery_.tier;
  if (tier == nullptr || !tier->enabled()) return;
  // Opening is retried here too (rate-limited), so a mount that appeared is picked up.
  auto t = tier->Get(false);
  if (t.ok()) {
    std::set<std::string> jobs;
    for (const auto& rank : store_->Ranks()) jobs.insert(rank.job);
    if (recovery_.timeline) {
      for (const auto& job : recovery_.timeline->Jobs()) jobs.insert(job);
    }
    for (const auto& job : jobs) {
      auto layout = KnownLayout(recovery_.timeline, job);
      if (!layout) continue;
      auto newest = (*t)->NewestCompleteStep(job, *layout);
      if (!newest.ok()) {
        tier->Report(newest.status());
        break;
      }
      auto* pj = out->add_jobs();
      pj->set_job(job);
      pj->set_newest_complete_step(newest->value_or(-1));
    }
  }
  const recovery::TierHealth h = tier->Health();
  out->set_healthy(h.healthy);
  out->set_last_error(h.last_error);
  out->set_last_error_unix_ms(h.last_error_unix_ms);
}

grpc::Status AdminService::RestoreCheck(grpc::ServerContext* ctx,
                                        const v1::RestoreCheckRequest* req,
                                        grpc::ServerWriter<v1::RestoreCheckEvent>* writer) {
  if (auto denied = auth_->CheckAdmin(ctx, "Admin/RestoreCheck"); !denied.ok()) return denied;
  if (auto st = CheckJobName(req->job()); !st.ok()) return proto::ToGrpc(st, ctx);
  if (recovery_.restore == nullptr) {
    return proto::ToGrpc(reft::Status::Unavailable("this daemon has no restore provider"), ctx);
  }
  const std::string& job = req->job();
  EventStream<v1::RestoreCheckEvent> events(writer);
  auto check = recovery_.restore->CheckRestore(job, [&](const recovery::Progress& p) {
    events.Progress("check", p.bytes_done, p.bytes_total, "groups", p.message);
  });
  if (!check.ok()) return proto::ToGrpc(check.status(), ctx);
  v1::RestoreCheckEvent ev;
  v1::RestoreCheckResponse* r = ev.mutable_result();
  r->set_job(job);
  r->set_step(check->step);
  r->set_recoverable(check->recoverable);
  r->set_summary(check->Summary());
  r->set_dcp(check->dcp);
  for (const auto& g : check->groups) {
    auto* gi = r->add_groups();
    gi->set_pp(g.pp);
    gi->set_tp(g.tp);
    gi->set_members(g.members);
    gi->set_scheme(g.scheme);
    for (int d : g.alive) gi->add_alive(d);
    for (const auto& sc : g.shards) {
      auto* si = gi->add_shards();
      si->set_dp(sc.dp);
      si->set_state(sc.state);
      si->set_node(sc.node);
      si->set_detail(sc.detail);
    }
    for (const auto& rc : g.ranks) {
      auto* ri = gi->add_ranks();
      peer::ToRankId(rc.rank, ri->mutable_rank());
      for (const auto& n : rc.nodes) ri->add_nodes(n);
      ri->set_unique(rc.unique);
      ri->set_rebuildable(rc.rebuildable);
    }
    gi->set_recoverable(g.recoverable);
    gi->set_lost(g.lost);
  }
  for (const auto& u : check->unreachable) r->add_unreachable(u);
  for (const auto& w : check->warnings) r->add_warnings(w);
  if (recovery_.timeline) {
    const auto gen = recovery_.timeline->Generation(job);
    r->set_generation(gen.generation);
    if (gen.base_step) {
      r->set_has_base(true);
      r->set_base_step(*gen.base_step);
    }
    r->set_fallback_reason(gen.reason);
  }
  recovery::PersistentCheck pc;
  if (recovery_.tier != nullptr) {
    events.Progress("check", 0, 0, "", "reading the persistent tier");
    pc = recovery::CheckPersistent(
        recovery_.tier, job, KnownLayout(recovery_.timeline, job),
        check->step >= 0 ? std::optional<int64_t>(check->step) : std::nullopt);
  }
  auto* p = r->mutable_persistent();
  p->set_enabled(pc.enabled);
  p->set_dir(pc.dir);
  p->set_error(pc.error);
  if (pc.newest_complete) {
    p->set_has_newest_complete(true);
    p->set_newest_complete(*pc.newest_complete);
  }
  p->set_step_complete(pc.step_complete);
  for (int64_t st : pc.steps) p->add_steps(st);
  for (const auto& pr : pc.problems) p->add_problems(pr);
  // What a restore would deliver now (ReftLoad's choice, docs/recovery.md).
  if (check->step >= 0 && check->recoverable) {
    r->set_restore_source("memory");
    r->set_restore_step(check->step);
  } else if (check->step >= 0 && pc.step_complete) {
    r->set_restore_source("persistent");
    r->set_restore_step(check->step);
  } else if (pc.newest_complete) {
    r->set_restore_source("fallback");
    r->set_restore_step(*pc.newest_complete);
  } else {
    r->set_restore_source("none");
    r->set_restore_step(-1);
  }
  events.Result(ev);
  return grpc::Status::OK;
}

namespace {

// Holders serve a job's bytes only to nodes tied to it (peer/job_access.h): the node an
// operator's rebuild or persist runs on is, for as long as the command runs. A mark that cannot
// be written (etcd unreachable) does not stop the command: the node may be tied to the job
// otherwise, and a holder that refuses says why.
class OperatorCommand {
 public:
  OperatorCommand(peer::JobAccess* access, std::string job) : job_(std::move(job)) {
    if (access == nullptr) return;
    if (auto st = access->BeginOperatorCommand(job_); !st.ok()) {
      spdlog::warn("job {}: this node is not marked as running an operator's command ({}); "
                   "holders serve it only if it is tied to the job otherwise", job_,
                   st.ToString());
      return;
    }
    access_ = access;
  }
  ~OperatorCommand() {
    if (access_ != nullptr) access_->EndOperatorCommand(job_);
  }
  OperatorCommand(const OperatorCommand&) = delete;
  OperatorCommand& operator=(const OperatorCommand&) = delete;

 private:
  peer::JobAccess* access_ = nullptr;  ///< set once the mark is written
  const std::string job_;
};

}  // namespace

grpc::Status AdminService::Persist(grpc::ServerContext* ctx, const v1::PersistRequest* req,
                                   grpc::ServerWriter<v1::PersistEvent>* writer) {
  if (auto denied = CheckJobCall(ctx, "Admin/Persist", req->job()); !denied.ok()) return denied;
  if (auto st = CheckJobName(req->job()); !st.ok()) return proto::ToGrpc(st, ctx);
  if (recovery_.persister == nullptr || recovery_.tier == nullptr || !recovery_.tier->enabled()) {
    return proto::ToGrpc(reft::Status::Unsupported("no persistent tier is configured on node '" +
                                                   config_.node_id + "' (persist_dir)"),
                         ctx);
  }
  if (req->has_step() && req->step() < 0) {
    return proto::ToGrpc(reft::Status::InvalidArgument("step must not be negative"), ctx);
  }
  OperatorCommand command(recovery_.access, req->job());
  EventStream<v1::PersistEvent> events(writer);
  auto rep = recovery_.persister->PersistJob(
      req->job(), req->has_step() ? std::optional<int64_t>(req->step()) : std::nullopt,
      [&](int done, int total, const std::string& message) {
        events.Progress("persist", static_cast<uint64_t>(done), static_cast<uint64_t>(total),
                        "nodes", message);
      });
  if (!rep.ok()) return proto::ToGrpc(rep.status(), ctx);
  v1::PersistEvent ev;
  v1::PersistResponse* r = ev.mutable_result();
  r->set_job(rep->job);
  r->set_step(rep->step);
  for (const auto& n : rep->nodes) {
    auto* ni = r->add_nodes();
    ni->set_node_id(n.node);
    ni->set_code(ToErrorCode(n.status.code()));
    ni->set_message(n.status.message());
    ni->set_skipped(n.skipped);
    ni->set_skipped_reason(n.skipped_reason);
    for (const auto& k : n.ranks) peer::ToRankId(k, ni->add_ranks());
    ni->set_bytes_written(n.bytes);
    ni->set_seconds(n.seconds);
  }
  r->set_complete(rep->complete);
  for (const auto& pr : rep->problems) r->add_problems(pr);
  if (rep->newest_complete) {
    r->set_has_newest_complete(true);
    r->set_newest_complete(*rep->newest_complete);
  }
  for (const auto& w : rep->warnings) r->add_warnings(w);
  r->set_ok(rep->ok());
  events.Result(ev);
  return grpc::Status::OK;
}

grpc::Status AdminService::Rebuild(grpc::ServerContext* ctx, const v1::RebuildRequest* req,
                                   grpc::ServerWriter<v1::RebuildEvent>* writer) {
  if (auto denied = auth_->CheckAdmin(ctx, "Admin/Rebuild"); !denied.ok()) return denied;
  if (auto st = CheckJobName(req->job()); !st.ok()) return proto::ToGrpc(st, ctx);
  if (recovery_.restore == nullptr) {
    return proto::ToGrpc(reft::Status::Unavailable("this daemon has no restore provider"), ctx);
  }
  OperatorCommand command(recovery_.access, req->job());
  EventStream<v1::RebuildEvent> events(writer);
  const auto start = std::chrono::steady_clock::now();
  auto rep = recovery_.restore->RebuildLostRanks(req->job(), [&](const recovery::Progress& p) {
    events.Progress(recovery::PhaseName(p.phase), p.bytes_done, p.bytes_total,
                    p.bytes_total > 0 ? "bytes" : "", p.message);
  });
  if (!rep.ok()) return proto::ToGrpc(rep.status(), ctx);
  v1::RebuildEvent ev;
  v1::RebuildResponse* r = ev.mutable_result();
  r->set_job(rep->job);
  r->set_step(rep->step);
  bool ok = true;
  for (const auto& rr : rep->ranks) {
    auto* ri = r->add_ranks();
    peer::ToRankId(rr.rank, ri->mutable_rank());
    ri->set_code(ToErrorCode(rr.status.code()));
    ri->set_message(rr.status.message());
    ri->set_detail(rr.detail);
    ok &= rr.status.ok();
  }
  r->set_bytes_local(rep->stats.bytes_local);
  r->set_bytes_peer(rep->stats.bytes_peer);
  r->set_bytes_rebuilt(rep->stats.bytes_rebuilt);
  r->set_seconds(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  for (const auto& w : rep->stats.warnings) r->add_warnings(w);
  r->set_ok(ok);
  events.Result(ev);
  return grpc::Status::OK;
}

grpc::Status AdminService::AttachPlanProfile(grpc::ServerContext* ctx,
                                             const v1::AttachPlanProfileRequest* req,
                                             v1::AttachPlanProfileResponse* resp) {
  if (auto denied = CheckJobCall(ctx, "Admin/AttachPlanProfile", req->job()); !denied.ok()) {
    return denied;
  }
  if (auto st = CheckJobName(req->job()); !st.ok()) return proto::ToGrpc(st, ctx);
  if (recovery_.profiles == nullptr) {
    return proto::ToGrpc(reft::Status::Unavailable("this daemon keeps no plan profiles"), ctx);
  }
  auto doc = nlohmann::json::parse(req->profile_json(), nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) {
    return proto::ToGrpc(reft::Status::InvalidArgument("profile: not a JSON document"), ctx);
  }
  // The job's layer count, when a committed step tells it: a profile of another model is
  // refused now rather than at the next failure.
  int layers = 0;
  if (auto model = replan::ReadJobModel(recovery_.restore, recovery_.slots,
                                        recovery_.cadence, req->job());
      model.ok()) {
    layers = static_cast<int>(model->layers.size());
  }
  if (auto st = planner::online::CheckProfile(doc, layers); !st.ok()) return proto::ToGrpc(st, ctx);
  if (auto st = recovery_.profiles->Attach(req->job(), doc); !st.ok()) return proto::ToGrpc(st, ctx);
  if (recovery_.planner != nullptr) recovery_.planner->Replan();
  resp->set_job(req->job());
  auto parsed = planner::ParseModel(doc["model"]);
  resp->set_layers(parsed.ok() ? static_cast<uint32_t>(parsed->layers.size()) : 0);
  resp->set_layers_checked(layers > 0);
  return grpc::Status::OK;
}

grpc::Status AdminService::ShowPlan(grpc::ServerContext* ctx, const v1::ShowPlanRequest* req,
                                    v1::ShowPlanResponse* resp) {
  if (auto denied = auth_->CheckAdmin(ctx, "Admin/ShowPlan"); !denied.ok()) return denied;
  if (auto st = CheckJobName(req->job()); !st.ok()) return proto::ToGrpc(st, ctx);
  if (recovery_.planner == nullptr) {
    return proto::ToGrpc(reft::Status::Unavailable("this daemon has no planner"), ctx);
  }
  auto out = recovery_.planner->Show(req->job());
  if (!out.ok()) return proto::ToGrpc(out.status(), ctx);
  resp->set_job(req->job());
  resp->set_plan_json(replan::ToJson(*out).dump());  // the Admin edge of the typed decision
  return grpc::Status::OK;
}

grpc::Status AdminService::ConfirmPlan(grpc::ServerContext* ctx, const v1::ConfirmPlanRequest* req,
                                       v1::ConfirmPlanResponse* resp) {
  if (auto denied = CheckJobCall(ctx, "Admin/ConfirmPlan", req->job()); !denied.ok()) return denied;
  if (auto st = CheckJobName(req->job()); !st.ok()) return proto::ToGrpc(st, ctx);
  if (recovery_.planner == nullptr) {
    return proto::ToGrpc(reft::Status::Unavailable("this daemon has no planner"), ctx);
  }
  auto plan = recovery_.planner->Confirm(req->job(), req->version());
  if (!plan.ok()) return proto::ToGrpc(plan.status(), ctx);
  resp->set_job(req->job());
  resp->set_version(plan->version);
  resp->set_state(plan->state);
  return grpc::Status::OK;
}

grpc::Status AdminService::ListJobs(grpc::ServerContext* ctx, const v1::ListJobsRequest*,
                                    v1::ListJobsResponse* resp) {
  if (auto denied = auth_->CheckAdmin(ctx, "Admin/ListJobs"); !denied.ok()) return denied;
  if (recovery_.records == nullptr) {
    return proto::ToGrpc(reft::Status::Unavailable("this daemon keeps no job records"), ctx);
  }
  auto records = recovery_.records->List();
  if (!records.ok()) return proto::ToGrpc(records.status(), ctx);
  for (const auto& r : *records) {
    auto* j = resp->add_jobs();
    j->set_job(r.job);
    if (r.owner) {
      auto* o = j->mutable_owner();
      o->set_uid(r.owner->uid);
      o->set_has_gid(r.owner->gid.has_value());
      o->set_gid(r.owner->gid.value_or(0));
      o->set_group(r.owner->group);
      o->set_claimed_at_ms(r.owner->claimed_at_ms);
      o->set_claimed_on(r.owner->claimed_on);
    }
    j->set_state(r.state);
    for (const auto& n : r.nodes) j->add_nodes(n);
    j->set_trainers(static_cast<uint32_t>(std::max(0, r.trainers)));
    j->set_has_committed_step(r.committed_step.has_value());
    j->set_committed_step(r.committed_step.value_or(-1));
    j->set_has_persisted_step(r.persisted_step.has_value());
    j->set_persisted_step(r.persisted_step.value_or(-1));
    j->set_last_activity_ms(r.last_activity_ms);
    j->set_forget_in_ms(r.state == "gone" ? std::max<int64_t>(0, r.forget_in_ms) : -1);
  }
  resp->set_now_ms(std::chrono::duration_cast<std::chrono::milliseconds>(
                       std::chrono::system_clock::now().time_since_epoch())
                       .count());
  resp->set_forget_after_s(config_.jobs_forget_after_s);
  return grpc::Status::OK;
}

grpc::Status AdminService::ReleaseJob(grpc::ServerContext* ctx, const v1::ReleaseJobRequest* req,
                                      v1::ReleaseJobResponse* resp) {
  if (auto denied = CheckJobCall(ctx, "Admin/ReleaseJob", req->job()); !denied.ok()) return denied;
  if (auto st = CheckJobName(req->job()); !st.ok()) return proto::ToGrpc(st, ctx);
  if (recovery_.records == nullptr) {
    return proto::ToGrpc(reft::Status::Unavailable("this daemon keeps no job records"), ctx);
  }
  if (auto st = recovery_.records->Release(req->job(), req->force()); !st.ok()) {
    return proto::ToGrpc(st, ctx);
  }
  resp->set_job(req->job());
  resp->set_forced(req->force());
  return grpc::Status::OK;
}

}  // namespace reft::app
