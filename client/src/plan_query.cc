// reft::QueryPlan: a job's plan document from the node's reftd over the local channel, for
// launchers and reft.elastic (docs/planner.md "The online path"). One connection, one
// plan_query, no hello: the caller need not know its rank yet, and needs no operator rights
// (reftd answers the job's owner only).
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdlib>

#include "channel.h"
#include "reft/client.h"
#include "reftd_socket.h"

namespace reft {
namespace {

using local_proto::MessageType;

// The document of a reply in the file form: the first `size` bytes of the memfd reftd sent.
Result<std::string> ReadPlanFile(const local_proto::Frame& frame, uint64_t size) {
  if (frame.fds.size() != 1) {
    return Status::Protocol("plan_reply names a file but carries " +
                            std::to_string(frame.fds.size()) + " fds");
  }
  const int fd = frame.fds[0].get();
  struct stat st{};
  if (::fstat(fd, &st) != 0) return Status::FromErrno(errno, "fstat of the plan file");
  if (static_cast<uint64_t>(st.st_size) < size) {
    return Status::Protocol("plan file of " + std::to_string(st.st_size) +
                            " bytes is smaller than the " + std::to_string(size) + " announced");
  }
  std::string out(size, '\0');
  uint64_t done = 0;
  while (done < size) {
    const ssize_t n = ::pread(fd, out.data() + done, size - done, static_cast<off_t>(done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Status::FromErrno(errno, "reading the plan file");
    if (n == 0) return Status::Protocol("plan file ended early");
    done += static_cast<uint64_t>(n);
  }
  return out;
}

}  // namespace

Result<std::string> QueryPlan(const std::string& socket_path, const std::string& job,
                              std::chrono::milliseconds timeout) {
  if (job.empty()) return Status::InvalidArgument("job must not be empty");
  if (timeout.count() <= 0) return Status::InvalidArgument("timeout must be > 0");
  local_proto::PlanQuery query;
  query.job = job;
  REFT_ASSIGN_OR_RETURN(local_proto::Frame reply,
                        client::CallReftdOnce(socket_path, timeout, MessageType::kPlanQuery,
                                              local_proto::Encode(query), MessageType::kPlanReply,
                                              "plan queries"));
  local_proto::PlanReply plan;
  REFT_RETURN_NOT_OK(local_proto::Decode(reply.payload, local_proto::Limits{}, &plan));
  if (plan.file_bytes == 0) {
    if (!reply.fds.empty()) return Status::Protocol("an inline plan_reply carries fds");
    return std::move(plan.json);
  }
  return ReadPlanFile(reply, plan.file_bytes);
}

}  // namespace reft
