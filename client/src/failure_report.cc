// reft::ReportFailure: a trainer's or launcher's suspicion that a node of its job failed, to
// the node's reftd over the local channel (docs/coordination.md "Suspicions"). One
// connection, one failure_report, no hello: a launcher whose workers died has no rank to join.
#include "reft/client.h"
#include "reft/local_proto/messages.h"
#include "reftd_socket.h"

namespace reft {

Result<std::vector<std::string>> ReportFailure(const std::string& socket_path,
                                               const std::string& job, const std::string& reason,
                                               std::optional<int64_t> peer_rank,
                                               std::chrono::milliseconds timeout) {
  using local_proto::MessageType;
  if (job.empty()) return Status::InvalidArgument("job must not be empty");
  if (timeout.count() <= 0) return Status::InvalidArgument("timeout must be > 0");
  if (peer_rank && *peer_rank < 0) {
    return Status::InvalidArgument("peer_rank must be >= 0, not " + std::to_string(*peer_rank));
  }
  local_proto::FailureReport report;
  report.job = job;
  report.reason = reason.substr(0, local_proto::FailureReport::kMaxReason);
  report.peer_rank = peer_rank;
  REFT_ASSIGN_OR_RETURN(
      local_proto::Frame reply,
      client::CallReftdOnce(socket_path, timeout, MessageType::kFailureReport,
                            local_proto::Encode(report), MessageType::kFailureReportReply,
                            "failure reports"));
  local_proto::FailureReportReply nodes;
  REFT_RETURN_NOT_OK(local_proto::Decode(reply.payload, local_proto::Limits{}, &nodes));
  return std::move(nodes.nodes);
}

}  // namespace reft
