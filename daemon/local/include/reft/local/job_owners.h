#pragma once
/// \file job_owners.h
/// \brief The node's own record of job owners, for a reftd without etcd (one node, or the gossip
/// control plane): docs/security.md "Jobs belong to their owner".
///
/// The problem: the record must survive a reftd restart (the adopted slots keep their owners),
/// stay cheap when a uid claims thousands of job names (scheduler job ids are predictable), and
/// forget a job once it is gone, so that nothing grows with names ever seen. So the record is an
/// append-only journal next to the slots (`<shm_dir>/job-owners`): a claim appends one line, a
/// forgotten job appends one, and the file is rewritten (atomically, by rename) only when the
/// lines it holds exceed twice the live owners — O(1) amortised per claim.
///
/// On etcd the owner lives in etcd (coord::EtcdJobCoordinator implements JobOwnership); this
/// journal is then only read at start, to import owners etcd does not have yet.

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "reft/local/job_ownership.h"
#include "reft/mutex.h"
#include "reft/peer_credentials.h"
#include "reft/result.h"

namespace reft::local {

class JobOwners final : public JobOwnership {
 public:
  /// \brief `path` is the journal ("" = in memory only, for tests): replayed when it exists. A
  /// line that cannot be parsed is an error naming the file and line: starting without it would
  /// hand the jobs to whoever comes first.
  static Result<std::unique_ptr<JobOwners>> Open(std::string path);

  /// Claims the job with `claim` when it has no owner, else checks the caller.
  Status Admit(const std::string& job, const PeerCredentials& caller,
               const JobOwner& claim) override REFT_EXCLUDES(mu_);
  Result<std::optional<JobOwner>> Owner(const std::string& job) override REFT_EXCLUDES(mu_);
  Result<std::map<std::string, JobOwner>> All() override REFT_EXCLUDES(mu_);
  void NoteDenied(const std::string& job) override;

  /// \brief Forgets `job`'s owner (the job is gone, or an operator released it): the next
  /// hello claims it anew. NotFound when it has none.
  Status Forget(const std::string& job) REFT_EXCLUDES(mu_);
  size_t size() const REFT_EXCLUDES(mu_);

  /// \brief Called with the job at every refusal (the daemon counts them in a metric). Set it
  /// before the owners are shared.
  void SetDeniedObserver(std::function<void(const std::string& job)> observer) {
    on_denied_ = std::move(observer);
  }
  uint64_t denied() const { return denied_.load(); }

 private:
  explicit JobOwners(std::string path) : path_(std::move(path)) {}
  Status Load() REFT_EXCLUDES(mu_);
  /// Appends one journal line (and compacts when the journal has grown past twice the owners).
  Status AppendLocked(const std::string& line) REFT_REQUIRES(mu_);
  Status CompactLocked() REFT_REQUIRES(mu_);

  const std::string path_;
  mutable Mutex mu_;
  std::map<std::string, JobOwner> owners_ REFT_GUARDED_BY(mu_);
  size_t journal_lines_ REFT_GUARDED_BY(mu_) = 0;
  std::function<void(const std::string&)> on_denied_;
  std::atomic<uint64_t> denied_{0};
};

/// \brief Checks a job id as the record keeps it (not empty, no control characters).
Status CheckJobId(const std::string& job);

}  // namespace reft::local
