#include "reft/app/admin_service.h"

#include <algorithm>
#include <map>

#include "reft/kernels/device.h"
#include "reft/v1/common.pb.h"

namespace reft::app {
namespace {

constexpr uint32_t kProtocolVersion = 1;
constexpr size_t kMaxJobName = 64;

void FillRank(const store::RankKey& key, v1::RankId* out) {
  out->set_job(key.job);
  out->set_pp(key.pp);
  out->set_tp(key.tp);
  out->set_dp(key.dp);
}

grpc::StatusCode ToGrpcCode(StatusCode code) {
  switch (code) {
    case StatusCode::kOk: return grpc::StatusCode::OK;
    case StatusCode::kInvalidArgument: return grpc::StatusCode::INVALID_ARGUMENT;
    case StatusCode::kNotFound: return grpc::StatusCode::NOT_FOUND;
    case StatusCode::kAlreadyExists: return grpc::StatusCode::ALREADY_EXISTS;
    case StatusCode::kOutOfMemory: return grpc::StatusCode::RESOURCE_EXHAUSTED;
    case StatusCode::kCorrupted: return grpc::StatusCode::DATA_LOSS;
    case StatusCode::kLost: return grpc::StatusCode::DATA_LOSS;
    case StatusCode::kUnavailable: return grpc::StatusCode::UNAVAILABLE;
    case StatusCode::kTimeout: return grpc::StatusCode::DEADLINE_EXCEEDED;
    case StatusCode::kPermissionDenied: return grpc::StatusCode::PERMISSION_DENIED;
    case StatusCode::kBusy: return grpc::StatusCode::FAILED_PRECONDITION;
    case StatusCode::kCancelled: return grpc::StatusCode::CANCELLED;
    case StatusCode::kUnsupported: return grpc::StatusCode::UNIMPLEMENTED;
    default: return grpc::StatusCode::INTERNAL;
  }
}

reft::Status CheckJobName(const std::string& job) {
  if (job.empty()) return reft::Status::InvalidArgument("job must not be empty");
  if (job.size() > kMaxJobName) return reft::Status::InvalidArgument("job name longer than 64 bytes");
  return reft::Status::OK();
}

}  // namespace

grpc::Status ToGrpcStatus(grpc::ServerContext* ctx, const reft::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  if (ctx) ctx->AddTrailingMetadata("reft-code", StatusCodeName(status.code()));
  return grpc::Status(ToGrpcCode(status.code()), status.message());
}

AdminService::AdminService(const DaemonConfig& config, store::SnapshotStore* store,
                           SessionLister sessions, const security::TokenAuthorizer* auth,
                           const peer::Membership* membership)
    : config_(config),
      store_(store),
      sessions_(std::move(sessions)),
      auth_(auth),
      membership_(membership),
      started_(std::chrono::steady_clock::now()) {}

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
  if (auto denied = auth_->Check(ctx, "Admin/Status"); !denied.ok()) return denied;
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
  for (const auto& [job, ranks] : ranks_per_job) {
    auto* js = resp->add_jobs();
    js->set_job(job);
    js->set_ranks(ranks);
    js->set_newest_committed_step(NewestCommittedStep(store_, job));
  }
  if (sessions_) {
    for (auto& s : sessions_()) *resp->add_sessions() = std::move(s);
  }
  for (const auto& m : membership_->LiveMembers()) resp->add_peers(m.address);
  resp->set_listen(config_.listen);
  resp->set_socket(config_.socket);
  resp->set_shm_dir(config_.shm_dir);
  resp->set_uptime_seconds(std::chrono::duration_cast<std::chrono::seconds>(
                               std::chrono::steady_clock::now() - started_)
                               .count());
  return grpc::Status::OK;
}

grpc::Status AdminService::ListSnapshots(grpc::ServerContext* ctx,
                                         const v1::ListSnapshotsRequest* req,
                                         v1::ListSnapshotsResponse* resp) {
  if (auto denied = auth_->Check(ctx, "Admin/ListSnapshots"); !denied.ok()) return denied;
  std::optional<std::string> job;
  if (!req->job().empty()) {
    if (auto st = CheckJobName(req->job()); !st.ok()) return ToGrpcStatus(ctx, st);
    job = req->job();
  }
  for (const auto& slot : store_->List(job)) {
    auto* d = resp->add_snapshots();
    FillRank(slot.rank, d->mutable_rank());
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
  if (auto denied = auth_->Check(ctx, "Admin/VerifySnapshot"); !denied.ok()) return denied;
  if (auto st = CheckJobName(req->job()); !st.ok()) return ToGrpcStatus(ctx, st);
  auto ranks = store_->Ranks(req->job());
  if (ranks.empty()) {
    return ToGrpcStatus(ctx, reft::Status::NotFound("no snapshots of job '" + req->job() + "' on this node"));
  }
  int64_t step = req->has_step() ? req->step() : NewestCommittedStep(store_, req->job());
  if (step < 0) {
    return ToGrpcStatus(ctx, reft::Status::NotFound("job '" + req->job() + "' has no committed step"));
  }
  resp->set_job(req->job());
  resp->set_step(step);
  uint32_t checked = 0;
  uint64_t chunks = 0;
  for (const auto& rank : ranks) {
    auto report = store_->Verify(rank, step);
    if (report.status().code() == StatusCode::kNotFound) continue;
    if (!report.ok()) return ToGrpcStatus(ctx, report.status());
    ++checked;
    chunks += report->chunks_checked;
    for (const auto& bad : report->bad) {
      auto* b = resp->add_bad();
      FillRank(rank, b->mutable_rank());
      b->set_region(bad.region);
      b->set_chunk(bad.chunk);
      b->set_offset(bad.offset);
    }
  }
  if (checked == 0) {
    return ToGrpcStatus(ctx, reft::Status::NotFound("job '" + req->job() + "' has no step " +
                                                    std::to_string(step) + " on this node"));
  }
  resp->set_ranks_checked(checked);
  resp->set_chunks_checked(chunks);
  resp->set_ok(resp->bad_size() == 0);
  return grpc::Status::OK;
}

grpc::Status AdminService::DropSnapshot(grpc::ServerContext* ctx,
                                        const v1::DropSnapshotRequest* req,
                                        v1::DropSnapshotResponse* resp) {
  if (auto denied = auth_->Check(ctx, "Admin/DropSnapshot"); !denied.ok()) return denied;
  if (auto st = CheckJobName(req->job()); !st.ok()) return ToGrpcStatus(ctx, st);
  if (!req->force() && req->step() == NewestCommittedStep(store_, req->job())) {
    return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                        "step " + std::to_string(req->step()) +
                            " is the newest committed snapshot of job '" + req->job() +
                            "'; dropping it loses the restorable state (use --force)");
  }
  uint32_t freed = 0;
  for (const auto& slot : store_->List(req->job())) {
    if (slot.step == req->step()) ++freed;
  }
  if (auto st = store_->Drop(req->job(), req->step()); !st.ok()) return ToGrpcStatus(ctx, st);
  resp->set_slots_freed(freed);
  return grpc::Status::OK;
}

grpc::Status AdminService::ListNodes(grpc::ServerContext* ctx, const v1::ListNodesRequest*,
                                    v1::ListNodesResponse* resp) {
  if (auto denied = auth_->Check(ctx, "Admin/ListNodes"); !denied.ok()) return denied;
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

}  // namespace reft::app
