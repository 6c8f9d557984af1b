#pragma once
/// \file admin_service.h
/// \brief The Admin gRPC service (proto/reft/v1/admin.proto) over the node's snapshot store.

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "config.h"
#include "reft/replan/job_planner.h"
#include "reft/replan/plan_profiles.h"
#include "reft/replan/step_cadence.h"
#include "reft/coord/etcd_probe.h"
#include "reft/local/job_ownership.h"
#include "reft/peer/job_access.h"
#include "reft/peer/job_records.h"
#include "reft/coord/roles.h"
#include "reft/peer/node_directory.h"
#include "reft/planner/online.h"
#include "reft/persister/persister.h"
#include "reft/recovery/reft_load.h"
#include "reft/recovery/tier_access.h"
#include "reft/security/authorizer.h"
#include "reft/store/snapshot_store.h"
#include "reft/v1/admin.grpc.pb.h"

namespace reft::app {

/// \brief Supplies the local sessions listed by Status (the local channel owns them).
using SessionLister = std::function<std::vector<v1::SessionInfo>()>;

/// \brief The cluster side the recovery RPCs use (RestoreCheck, Persist, Rebuild, the
/// persistent tier in Status). Any may be null: the RPCs that need it answer UNAVAILABLE or
/// UNIMPLEMENTED then.
struct AdminRecovery {
  recovery::ReftLoad* restore = nullptr;
  persister::Persister* persister = nullptr;
  recovery::TierAccess* tier = nullptr;
  /// The jobs this node follows, their layouts and generations (Status, restore-check).
  coord::JobTimeline* timeline = nullptr;
  /// Where each rank's slot of a step was recorded (the job model of `plan profile`).
  coord::SlotDirectory* slots = nullptr;
  /// Who owns each job (shown by Status and `jobs list`; counts refused calls on a job).
  local::JobOwnership* owners = nullptr;
  /// Marks this node as running an operator's rebuild or persist of a job, so holders serve it
  /// (null: gossip, nothing to mark).
  peer::JobAccess* access = nullptr;
  /// The job records `reftctl jobs list|release` show and release (etcd's, or this node's).
  peer::JobRecords* records = nullptr;
  /// The measured step time of each job and the attached profiles (ShowPlan, AttachPlanProfile).
  const replan::StepCadence* cadence = nullptr;
  replan::PlanProfiles* profiles = nullptr;
  /// The published decisions (ShowPlan, ConfirmPlan).
  replan::JobPlanner* planner = nullptr;
};

/// \brief Handles Admin RPCs. Stateless apart from the references it holds; gRPC may call it
/// from any thread (the store is thread-safe).
class AdminService final : public v1::Admin::Service {
 public:
  /// \brief `auth` checks every call (token, or the operator uid on the admin socket).
  AdminService(const DaemonConfig& config, store::SnapshotStore* store, SessionLister sessions,
               const security::Authorizer* auth, const peer::NodeDirectory* membership,
               AdminRecovery recovery = {});

  grpc::Status Status(grpc::ServerContext* ctx, const v1::StatusRequest* req,
                      v1::StatusResponse* resp) override;
  grpc::Status ListSnapshots(grpc::ServerContext* ctx, const v1::ListSnapshotsRequest* req,
                             v1::ListSnapshotsResponse* resp) override;
  grpc::Status VerifySnapshot(grpc::ServerContext* ctx, const v1::VerifySnapshotRequest* req,
                              v1::VerifySnapshotResponse* resp) override;
  grpc::Status DropSnapshot(grpc::ServerContext* ctx, const v1::DropSnapshotRequest* req,
                            v1::DropSnapshotResponse* resp) override;
  grpc::Status ListNodes(grpc::ServerContext* ctx, const v1::ListNodesRequest* req,
                         v1::ListNodesResponse* resp) override;
  grpc::Status RestoreCheck(grpc::ServerContext* ctx, const v1::RestoreCheckRequest* req,
                            grpc::ServerWriter<v1::RestoreCheckEvent>* writer) override;
  grpc::Status Persist(grpc::ServerContext* ctx, const v1::PersistRequest* req,
                       grpc::ServerWriter<v1::PersistEvent>* writer) override;
  grpc::Status Rebuild(grpc::ServerContext* ctx, const v1::RebuildRequest* req,
                       grpc::ServerWriter<v1::RebuildEvent>* writer) override;

  grpc::Status AttachPlanProfile(grpc::ServerContext* ctx, const v1::AttachPlanProfileRequest* req,
                                 v1::AttachPlanProfileResponse* resp) override;
  grpc::Status ShowPlan(grpc::ServerContext* ctx, const v1::ShowPlanRequest* req,
                        v1::ShowPlanResponse* resp) override;
  grpc::Status ConfirmPlan(grpc::ServerContext* ctx, const v1::ConfirmPlanRequest* req,
                           v1::ConfirmPlanResponse* resp) override;
  grpc::Status ListJobs(grpc::ServerContext* ctx, const v1::ListJobsRequest* req,
                        v1::ListJobsResponse* resp) override;
  grpc::Status ReleaseJob(grpc::ServerContext* ctx, const v1::ReleaseJobRequest* req,
                          v1::ReleaseJobResponse* resp) override;
  /// \brief Newest step committed on every local rank of `job`, or -1.
  static int64_t NewestCommittedStep(store::SnapshotStore* store, const std::string& job);

 private:
  const DaemonConfig& config_;
  store::SnapshotStore* store_;
  SessionLister sessions_;
  const security::Authorizer* auth_;
  const peer::NodeDirectory* membership_;
  void FillPersistStatus(v1::PersistTierStatus* out);
  /// \brief The control plane as this node reaches it (etcd: probed within a bounded time)
  /// and who coordinates each of `jobs` (job -> node). False when its store cannot be reached.
  bool FillControlPlane(const std::vector<std::string>& jobs, v1::ControlPlaneStatus* out,
                        std::map<std::string, std::string>* coordinators) const;
  static void FillDeathHolds(const peer::DeathHoldStatus& d, v1::DeathHolds* out);
  /// \brief CheckAdmin for a call on one job: a refusal also names the job's owner and counts
  /// as a refused access to the job.
  grpc::Status CheckJobCall(grpc::ServerContext* ctx, const char* method,
                            const std::string& job) const;

  AdminRecovery recovery_;
  std::chrono::steady_clock::time_point started_;
  /// Set when etcd is configured (else null); etcd_probe_error_: why it could not be made.
  std::unique_ptr<coord::EtcdProbe> etcd_probe_;
  std::string etcd_probe_error_;
};

}  // namespace reft::app
