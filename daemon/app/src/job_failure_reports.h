#pragma once
/// \file job_failure_reports.h
/// \brief reftd's answer to `reft.elastic.report_failure`: a job's trainer or launcher says a
/// node of the job failed; the node directory looks into it (NodeDirectory::Suspect), which
/// never declares a death on a report alone (docs/coordination.md "Suspicions").
///
/// A report names a peer rank (the node whose trainer of that rank is connected, else the node
/// that held its slot) or none ("a worker group failed": every other node of the job). Reports
/// are rate-limited per job — a crash loop or a misbehaving launcher cannot turn this node into
/// a port scanner of the cluster — and a rank outside the job's layout is refused, naming it.

#include <chrono>
#include <map>
#include <string>

#include "reft/coord/roles.h"
#include "reft/local/failure_reports.h"
#include "reft/mutex.h"
#include "reft/peer/node_directory.h"

namespace reft {

class JobFailureReports final : public local::FailureReports {
 public:
  struct Limits {
    int burst = 3;       ///< reports a job may send at once
    int per_second = 1;  ///< and then per second
  };
  JobFailureReports(coord::JobTimeline* timeline, coord::SlotDirectory* slots,
                    peer::NodeDirectory* nodes, Limits limits);

  Result<std::vector<std::string>> Report(const std::string& job, const std::string& reason,
                                          std::optional<int64_t> peer_rank) override;

 private:
  using Clock = std::chrono::steady_clock;
  struct Allowance {
    double tokens = 0;
    Clock::time_point at;
  };
  /// Takes one report of `job` from its allowance; false when it has none left.
  bool Admit(const std::string& job) REFT_EXCLUDES(mu_);
  Result<std::vector<std::string>> NodesOf(const std::string& job,
                                           std::optional<int64_t> peer_rank);

  coord::JobTimeline* const timeline_;
  coord::SlotDirectory* const slots_;
  peer::NodeDirectory* const nodes_;
  const Limits limits_;
  Mutex mu_;
  /// Jobs that reported lately; an allowance back to full is dropped (nothing grows with the
  /// job names ever seen).
  std::map<std::string, Allowance> allowances_ REFT_GUARDED_BY(mu_);
};

}  // namespace reft
