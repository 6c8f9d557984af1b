#pragma once
/// \file failure_reports.h
/// \brief Where the local channel hands a trainer's or launcher's failure report
/// (`reft.elastic.report_failure`): a suspicion that a node of its job died.
///
/// The cluster layer (daemon/app) maps the report to nodes and has the node directory look into
/// them (NodeDirectory::Suspect); the local server does not depend on it. The session checks
/// that the caller owns the job before it hands the report on. Header only.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "reft/result.h"

namespace reft::local {

class FailureReports {
 public:
  virtual ~FailureReports() = default;
  /// \brief The nodes a report of `job` makes this node look into: the node of `peer_rank`, or
  /// every other node of the job. Never declares a death. Busy when the job
  /// reported too often; InvalidArgument for a rank outside the job's layout. Thread-safe.
  virtual Result<std::vector<std::string>> Report(const std::string& job, const std::string& reason,
                                                  std::optional<int64_t> peer_rank) = 0;
};

}  // namespace reft::local
