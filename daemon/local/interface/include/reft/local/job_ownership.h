#pragma once
/// \file job_ownership.h
/// \brief Who owns a job, and the one question every door asks: may this caller use it?
///
/// A job belongs to the uid (and optional group) of the trainer that claimed it first. On a
/// single node, or under the gossip control plane, the record is the node's own
/// (local::JobOwners, a journal next to the slots); on etcd it is `/reft/v1/jobs/<job>/owner`,
/// created once for the whole cluster in the same transaction as the job's layout
/// (coord::EtcdJobCoordinator), so a node where the job never ran enforces it like the others.
/// Every door that acts on a job for a local caller — a trainer's hello (and through it its
/// snapshots and restores), a plan query, an Admin call on the job by a non-operator — asks
/// JobOwnership. Refusals to someone who does not own the job name nothing of it (not its
/// owner, layout, nodes or buffers): knowing that a job exists is all a stranger learns.
/// Header only: the coordinators that implement it do not link the local server.

#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "reft/peer_credentials.h"
#include "reft/result.h"

namespace reft::local {

struct JobOwner {
  uint32_t uid = 0;
  std::optional<uint32_t> gid;  ///< the owner group, whose members share the job
  std::string group;            ///< its name as the claiming hello gave it ("" = none)
  int64_t claimed_at_ms = 0;    ///< unix time of the claim (0: unknown, e.g. an old record)
  std::string claimed_on;       ///< the node the claim was made on ("" = unknown)

  /// "uid 1000" or "uid 1000 (group 'team', gid 2000)", for the owner's and operators' eyes.
  std::string Describe() const {
    std::string s = "uid " + std::to_string(uid);
    if (gid) {
      s += " (group ";
      if (!group.empty()) s += "'" + group + "', ";
      s += "gid " + std::to_string(*gid) + ")";
    }
    return s;
  }
  bool operator==(const JobOwner& o) const { return uid == o.uid && gid == o.gid; }
};

/// \brief Whether `caller` may use a job owned by `owner`: the owner uid, or a member of the
/// owner group (primary or supplementary).
inline bool MayUse(const JobOwner& owner, const PeerCredentials& caller) {
  return caller.uid == owner.uid || (owner.gid && caller.InGroup(*owner.gid));
}

/// \brief The refusal a caller gets for a job it does not own. It names the job (the caller
/// gave it), the caller and the fix, nothing else of the job.
inline Status NotYourJob(const std::string& job, const PeerCredentials& caller) {
  return Status::PermissionDenied(
      "job '" + job + "' belongs to another user; uid " + std::to_string(caller.uid) +
      " may not use it: use another job name, or have an operator release the job once its "
      "trainers are gone (reftctl jobs release --job " + job + ")");
}

/// \brief The registry of job owners one reftd consults. Thread-safe.
class JobOwnership {
 public:
  virtual ~JobOwnership() = default;

  /// \brief A trainer's hello of `job` by `caller`, who would claim it as `claim` (from
  /// MakeClaim) if it has no owner yet: OK when the caller owns the job or may claim it;
  /// NotYourJob otherwise. A registry whose claims are made with the job's layout (etcd:
  /// CommitCoordinator::Join) only checks an existing owner here.
  virtual Status Admit(const std::string& job, const PeerCredentials& caller,
                       const JobOwner& claim) = 0;

  /// \brief The owner of `job`, if it has one (etcd: a linearizable read).
  virtual Result<std::optional<JobOwner>> Owner(const std::string& job) = 0;

  /// \brief OK when `caller` may use `job`; NotYourJob when the job has another owner;
  /// NotFound ("no job 'J'") when it has none — the same answer a stranger gets for a job that
  /// does not exist, so neither reveals the other.
  Status Check(const std::string& job, const PeerCredentials& caller) {
    auto owner = Owner(job);
    if (!owner.ok()) return owner.status();
    if (!owner->has_value()) return Status::NotFound("no job '" + job + "'");
    if (!MayUse(**owner, caller)) {
      NoteDenied(job);
      return NotYourJob(job, caller);
    }
    return Status::OK();
  }

  /// \brief Every owner this registry holds (etcd: every job of the cluster).
  virtual Result<std::map<std::string, JobOwner>> All() = 0;

  /// \brief Counts a refusal of a call on `job` (metric reft_job_access_denied_total).
  virtual void NoteDenied(const std::string& job) = 0;
};

/// \brief The claim a hello of `caller` makes: its uid, and `owner_group` when not empty (a
/// group name or numeric gid that must exist on this node and have the caller as a member;
/// InvalidArgument / PermissionDenied otherwise). Stamped with the time and `node`.
/// Implemented in reft_local (job_owners.cc).
Result<JobOwner> MakeClaim(const PeerCredentials& caller, const std::string& owner_group,
                           const std::string& node);

}  // namespace reft::local
