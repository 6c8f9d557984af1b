#include "channel.h"

#include <sys/socket.h>

namespace reft::client {

using local_proto::MessageType;

Result<local_proto::Frame> Channel::Call(MessageType type, const std::vector<uint8_t>& payload,
                                         MessageType expect, const std::vector<int>& fds,
                                         const Interim* interim) {
  MutexLock lock(mu_);
  if (!sock_.valid()) return Status::Unavailable("client is closed");
  const uint32_t id = next_id_++;
  Status sent = local_proto::SendFrame(sock_.get(), type, id, payload, fds);
  if (!sent.ok()) {
    // The daemon may have refused us and hung up (e.g. PermissionDenied at accept): its error
    // frame is still queued on our side and says more than "connection closed".
    auto pending = local_proto::RecvFrame(sock_.get(), limits_, 100);
    if (pending.ok() && pending->header.type == MessageType::kError) return ErrorOf(*pending);
    return sent;
  }
  for (;;) {
    auto frame = local_proto::RecvFrame(sock_.get(), limits_, timeout_ms_);
    if (!frame.ok() && frame.status().code() == StatusCode::kUnavailable) {
      // A reset is reported before frames still queued (Linux returns sk_err first): the
      // daemon's error reply may be right behind it.
      auto queued = local_proto::RecvFrame(sock_.get(), limits_, 0);
      if (queued.ok()) frame = std::move(queued);
    }
    if (!frame.ok()) {
      if (frame.status().code() == StatusCode::kUnavailable) {
        return Status::Unavailable("reftd closed the connection (daemon stopped or restarted)");
      }
      return frame.status().WithContext(std::string("waiting for the reply to ") +
                                        local_proto::MessageTypeName(type));
    }
    // A reply to an earlier request that timed out on our side: skip it.
    if (frame->header.request_id != id && frame->header.request_id != 0) continue;
    if (interim != nullptr && frame->header.type == interim->type &&
        frame->header.request_id == id) {
      REFT_RETURN_NOT_OK(interim->handle(*frame));
      continue;
    }
    if (frame->header.type == MessageType::kError) return ErrorOf(*frame);
    if (frame->header.type != expect) {
      return Status::Protocol(std::string("reftd answered ") + local_proto::MessageTypeName(type) +
                              " with " + local_proto::MessageTypeName(frame->header.type));
    }
    return frame;
  }
}

Status Channel::ErrorOf(const local_proto::Frame& frame) const {
  local_proto::ErrorReply e;
  REFT_RETURN_NOT_OK(local_proto::Decode(frame.payload, limits_, &e));
  if (frame.header.version == local_proto::kProtocolVersion) return local_proto::ToStatus(e);
  return Status::Protocol(
      "reftd speaks local protocol " + std::to_string(frame.header.version) +
      " and this client (reft " + REFT_VERSION + ") speaks " +
      std::to_string(local_proto::kProtocolVersion) +
      ": install the reft client of reftd's release (reftd --version); reftd said: " + e.message);
}

void Channel::Close() {
  MutexLock lock(mu_);
  sock_.reset();
}

}  // namespace reft::client
