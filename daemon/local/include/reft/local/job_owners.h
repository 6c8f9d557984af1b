#pragma once
/// \file job_owners.h
/// \brief Which uid owns each job on this node (docs/security.md "Jobs belong to their owner").
///
/// The uid that opens the first session of a job (its SO_PEERCRED) owns it, optionally
/// together with a group the hello names (`owner_group`). Every later session of the job must
/// come from the owner uid or a member of the owner group; anyone else is refused with
/// PermissionDenied naming the job, the owner and the caller (Admin calls on a job are
/// operators' only; their refusals name the owner and are counted here too). The record is a small text file next to the slots (shm_dir), so a
/// restarted reftd enforces the same owners over the slots it adopts. Thread-safe.

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "reft/mutex.h"
#include "reft/peer_credentials.h"
#include "reft/result.h"

namespace reft::local {

struct JobOwner {
  uint32_t uid = 0;
  std::optional<uint32_t> gid;  ///< the owner group, whose members share the job
  std::string group;            ///< its name as the claiming hello gave it ("" = none)
  /// "uid 1000" or "uid 1000 (group 'team', gid 2000)", for messages.
  std::string Describe() const;
};

class JobOwners {
 public:
  /// \brief `path` is the record file ("" = in memory only, for tests): read when it exists,
  /// rewritten (atomically, by rename) at every change. A record that cannot be parsed is an
  /// error naming the file and line: starting without it would hand the jobs to whoever
  /// comes first.
  static Result<std::unique_ptr<JobOwners>> Open(std::string path);

  /// \brief A session of `job` by `caller`: claims the job when it has no owner yet (with
  /// `owner_group` when not empty: a group name or a numeric gid that must exist on this
  /// node), otherwise checks the caller against the owner. `owner_group` of a later session
  /// is ignored: the claim decides.
  Status Admit(const std::string& job, const PeerCredentials& caller,
               const std::string& owner_group) REFT_EXCLUDES(mu_);

  std::optional<JobOwner> Owner(const std::string& job) const REFT_EXCLUDES(mu_);
  std::map<std::string, JobOwner> All() const REFT_EXCLUDES(mu_);

  /// \brief Called with the job at every refusal (the daemon counts them in a metric). Set it
  /// before the owners are shared.
  void SetDeniedObserver(std::function<void(const std::string& job)> observer) {
    on_denied_ = std::move(observer);
  }
  uint64_t denied() const { return denied_.load(); }
  /// \brief Counts a refusal of a call on `job` decided elsewhere (an Admin call on the job by
  /// someone who is not an operator), like the refusals of Admit().
  void NoteDenied(const std::string& job) const;

 private:
  explicit JobOwners(std::string path) : path_(std::move(path)) {}
  Status Load() REFT_EXCLUDES(mu_);
  Status SaveLocked() const REFT_REQUIRES(mu_);
  Status Refuse(const std::string& job, const JobOwner& owner,
                const PeerCredentials& caller) const;

  const std::string path_;
  mutable Mutex mu_;
  std::map<std::string, JobOwner> owners_ REFT_GUARDED_BY(mu_);
  std::function<void(const std::string&)> on_denied_;
  mutable std::atomic<uint64_t> denied_{0};
};

/// \brief Whether `caller` may use a job owned by `owner`.
bool MayUse(const JobOwner& owner, const PeerCredentials& caller);

}  // namespace reft::local
