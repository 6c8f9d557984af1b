#pragma once
/// \file etcd_job_owners.h
/// \brief Job owners in etcd: `/reft/v1/jobs/<job>/owner`, the same answer on every node.
///
/// The claim itself is made by EtcdJobCoordinator::Join, in the transaction that records the
/// job's layout (create-only: `create_revision == 0`), so a job never has a layout without an
/// owner and two first trainers on two nodes cannot both claim it. This class answers the other
/// doors: a hello is checked against an existing owner before anything else of the job is
/// touched (Admit), a plan query or an Admit call reads the owner (Owner), operators list them
/// (All). Owners recorded by an older reftd in `<shm_dir>/job-owners` are imported at start when
/// etcd has none for the job (Import). Thread-safe.

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "reft/coord/etcd_client.h"
#include "reft/local/job_ownership.h"

namespace reft::coord {

class EtcdJobOwners final : public local::JobOwnership {
 public:
  /// The owner this node last read for a job it follows (EtcdJobCoordinator::KnownOwner), for
  /// Admit while etcd cannot be reached: a trainer of a job running here may reconnect during
  /// an outage; nobody may claim or enter a job whose owner this node does not know.
  using KnownOwner = std::function<std::optional<local::JobOwner>(const std::string& job)>;
  EtcdJobOwners(std::shared_ptr<EtcdClient> etcd, KnownOwner known)
      : etcd_(std::move(etcd)), known_(std::move(known)) {}

  /// OK when the job has no owner yet (Join claims it) or `caller` may use it; NotYourJob
  /// otherwise; Unavailable when etcd cannot be read (nobody is let in unchecked).
  Status Admit(const std::string& job, const PeerCredentials& caller,
               const local::JobOwner& claim) override;
  Result<std::optional<local::JobOwner>> Owner(const std::string& job) override;
  Result<std::map<std::string, local::JobOwner>> All() override;
  void NoteDenied(const std::string& job) override;

  /// \brief Records each of `owners` in etcd unless the job has an owner there already
  /// (create-only); returns the jobs imported. Each import is logged.
  Result<std::vector<std::string>> Import(const std::map<std::string, local::JobOwner>& owners);

  /// Called with the job at every refusal (the daemon counts them in a metric). Set it before
  /// the owners are shared.
  void SetDeniedObserver(std::function<void(const std::string& job)> observer) {
    on_denied_ = std::move(observer);
  }
  uint64_t denied() const { return denied_.load(); }

 private:
  std::shared_ptr<EtcdClient> etcd_;
  const KnownOwner known_;
  std::function<void(const std::string&)> on_denied_;
  std::atomic<uint64_t> denied_{0};
};

}  // namespace reft::coord
