// Session::HandleFailureReport: a trainer's or launcher's suspicion that a node of its job
// failed (`reft.elastic.report_failure`), handed to the cluster layer (failure_reports.h).
#include "session.h"

namespace reft::local {

using local_proto::MessageType;

Status Session::HandleFailureReport(const local_proto::Frame& f) {
  if (!f.fds.empty()) return Status::Protocol("failure_report must not carry fds");
  local_proto::FailureReport report;
  REFT_RETURN_NOT_OK(local_proto::Decode(f.payload, options_.limits, &report));
  REFT_RETURN_NOT_OK(CheckJobId(report.job));
  // Only the job's owner may make reftd look into its nodes; anyone else learns nothing of
  // the job, not even whether it runs.
  REFT_RETURN_NOT_OK(ctx_.owners->Check(report.job, cred_));
  if (ctx_.failures == nullptr) {
    return Status::Unavailable("this daemon takes no failure reports (no control plane)");
  }
  local_proto::FailureReportReply reply;
  REFT_ASSIGN_OR_RETURN(reply.nodes,
                        ctx_.failures->Report(report.job, report.reason, report.peer_rank));
  return Reply(MessageType::kFailureReportReply, f.header.request_id, local_proto::Encode(reply));
}

}  // namespace reft::local
