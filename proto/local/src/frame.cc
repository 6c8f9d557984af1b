#include "reft/local_proto/frame.h"

#include <time.h>

#include <string>

#include "reft/local_proto/codec.h"
#include "reft/local_proto/has_hints.h"

namespace reft::local_proto {

int64_t MonotonicNs() {  // declared in has_hints.h
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

const char* MessageTypeName(MessageType type) {
  switch (type) {
    case MessageType::kHello: return "hello";
    case MessageType::kHelloReply: return "hello_reply";
    case MessageType::kRegister: return "register";
    case MessageType::kRegisterReply: return "register_reply";
    case MessageType::kSnapshotBegin: return "snapshot_begin";
    case MessageType::kSnapshotBeginReply: return "snapshot_begin_reply";
    case MessageType::kSnapshotStaged: return "snapshot_staged";
    case MessageType::kSnapshotDone: return "snapshot_done";
    case MessageType::kQueryCommitted: return "query_committed";
    case MessageType::kQueryCommittedReply: return "query_committed_reply";
    case MessageType::kRestore: return "restore";
    case MessageType::kRestoreReply: return "restore_reply";
    case MessageType::kRestoreDone: return "restore_done";
    case MessageType::kAck: return "ack";
    case MessageType::kError: return "error";
    case MessageType::kSnapshotAbort: return "snapshot_abort";
    case MessageType::kHasAttach: return "has_attach";
    case MessageType::kRestoreStream: return "restore_stream";
    case MessageType::kPlanQuery: return "plan_query";
    case MessageType::kPlanReply: return "plan_reply";
    case MessageType::kFailureReport: return "failure_report";
    case MessageType::kFailureReportReply: return "failure_report_reply";
    case MessageType::kAorStatus: return "aor_status";
    case MessageType::kAorStatusReply: return "aor_status_reply";
  }
  return "unknown";
}

void EncodeHeader(const FrameHeader& h, uint8_t* out) {
  Writer w;
  w.U32(h.magic);
  w.U16(h.version);
  w.U16(static_cast<uint16_t>(h.type));
  w.U32(h.flags);
  w.U32(h.request_id);
  w.U32(h.payload_length);
  w.U32(0);
  const auto& d = w.data();
  for (size_t i = 0; i < kFrameHeaderSize; ++i) out[i] = d[i];
}

Result<FrameHeader> DecodeHeader(const uint8_t* data, size_t size, size_t payload_bytes_present,
                                 const Limits& limits) {
  if (size < kFrameHeaderSize) {
    return Status::Protocol("truncated frame: " + std::to_string(size) + " bytes, header needs " +
                            std::to_string(kFrameHeaderSize));
  }
  Reader r(data, kFrameHeaderSize);
  FrameHeader h;
  uint16_t type = 0;
  uint32_t reserved = 0;
  REFT_RETURN_NOT_OK(r.U32(&h.magic, "magic"));
  REFT_RETURN_NOT_OK(r.U16(&h.version, "version"));
  REFT_RETURN_NOT_OK(r.U16(&type, "type"));
  REFT_RETURN_NOT_OK(r.U32(&h.flags, "flags"));
  REFT_RETURN_NOT_OK(r.U32(&h.request_id, "request_id"));
  REFT_RETURN_NOT_OK(r.U32(&h.payload_length, "payload_length"));
  REFT_RETURN_NOT_OK(r.U32(&reserved, "reserved"));
  if (h.magic != kFrameMagic) return Status::Protocol("bad frame magic: not a reft local frame");
  // An error of another version is read (its layout is frozen): it says why the peer refused.
  const bool error_reply = type == static_cast<uint16_t>(MessageType::kError);
  if (h.version != kProtocolVersion && !error_reply) {
    return Status::Protocol("incompatible local protocol version " + std::to_string(h.version) +
                            " (this side speaks " + std::to_string(kProtocolVersion) + ")");
  }
  if (type == 0 || type > kMaxMessageType) {
    return Status::Protocol("unknown message type " + std::to_string(type));
  }
  h.type = static_cast<MessageType>(type);
  if (h.flags != 0) return Status::Protocol("unknown frame flags " + std::to_string(h.flags));
  if (reserved != 0) return Status::Protocol("reserved header field is not zero");
  if (h.payload_length > limits.max_payload_bytes) {
    return Status::Protocol("frame payload of " + std::to_string(h.payload_length) +
                            " bytes exceeds the limit of " +
                            std::to_string(limits.max_payload_bytes));
  }
  if (h.payload_length != payload_bytes_present) {
    return Status::Protocol("frame declares a payload of " + std::to_string(h.payload_length) +
                            " bytes but carries " + std::to_string(payload_bytes_present));
  }
  return h;
}

}  // namespace reft::local_proto
