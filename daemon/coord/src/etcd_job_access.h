#pragma once
/// \file etcd_job_access.h
/// \brief peer::JobAccess on etcd: a node may fetch job J's bytes when etcd ties it to J — a
/// `joined` key of J names it, a slot location of J names it (it holds J's state itself), J's
/// published plan names it, an `operator` key of J is its (an operator's rebuild or persist runs there), or it holds J's coordinator key. One read transaction per (job, node) answers it; a yes is
/// remembered for `positive_ttl` (a restore fetches many regions in a burst), a no is never
/// remembered (the node may join the job a moment later). Thread-safe.

#include <chrono>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>

#include "reft/coord/etcd_client.h"
#include "reft/coord/etcd_node_directory.h"
#include "reft/mutex.h"
#include "reft/peer/job_access.h"

namespace reft::coord {

class EtcdJobAccess final : public peer::JobAccess {
 public:
  /// `nodes` outlives this object.
  EtcdJobAccess(std::shared_ptr<EtcdClient> etcd, EtcdNodeDirectory* nodes,
                std::chrono::milliseconds positive_ttl = std::chrono::seconds(5))
      : etcd_(std::move(etcd)), nodes_(nodes), positive_ttl_(positive_ttl) {}

  Status MayServe(const std::string& node, const std::string& job) override;
  Status BeginOperatorCommand(const std::string& job) override;
  void EndOperatorCommand(const std::string& job) override;

  /// \brief Every node etcd ties to `job` now (the answer MayServe checks against).
  Result<std::set<std::string>> TiedNodes(const std::string& job);

 private:
  using Clock = std::chrono::steady_clock;
  std::shared_ptr<EtcdClient> etcd_;
  EtcdNodeDirectory* nodes_;
  const std::chrono::milliseconds positive_ttl_;
  reft::Mutex mu_;
  std::map<std::pair<std::string, std::string>, Clock::time_point> allowed_  // until when
      REFT_GUARDED_BY(mu_);
};

}  // namespace reft::coord
