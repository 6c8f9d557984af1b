#pragma once
/// \file frame.h
/// \brief Local-channel frame: a fixed 24-byte header followed by a bounded payload, one frame
/// per SOCK_SEQPACKET message (the socket keeps message boundaries, so no stream reassembly).
///
/// Header (little-endian): magic u32 "RFTL", version u16, type u16, flags u32, request_id u32,
/// payload_length u32, reserved u32 (must be 0). Every request gets exactly one reply carrying
/// the same request_id: the matching *Reply type, or kError. One exception: a kRestore that
/// asked to stream may get one kRestoreStream frame (same request_id) before its reply.
/// Every request but kPlanQuery and kFailureReport needs a hello first; those two may be a
/// connection's only request (a launcher asks before it knows its rank, or after its workers died).

#include <cstddef>
#include <cstdint>

#include "reft/result.h"

namespace reft::local_proto {

constexpr uint32_t kFrameMagic = 0x4C544652;  // "RFTL" little-endian
/// 2: slots are sharded (SlotReply carries regions, hello reply the shard alignment).
/// 3: restore replies carry a RestoreReport.
/// 4: a restore stream hands pieces over in a shared ring, acknowledged (stream.h).
/// Message types are added without a new version: an older peer answers a type it does not
/// know with a Protocol error ("unknown message type N") and keeps the connection.
/// Frozen in every version, so that two sides of different versions can always tell each other
/// why they cannot talk: this header and the kError reply (ErrorReply). A side accepts a kError
/// frame of any version (FrameHeader::version says which) and refuses every other frame of a
/// version it does not speak.
constexpr uint16_t kProtocolVersion = 4;
constexpr size_t kFrameHeaderSize = 24;

enum class MessageType : uint16_t {
  kHello = 1,                ///< client -> daemon: job, rank coordinates, layout, protection
  kHelloReply = 2,
  kRegister = 3,             ///< one buffer (+ its memfd for emulated memory)
  kRegisterReply = 4,
  kSnapshotBegin = 5,        ///< take a writing slot for a step
  kSnapshotBeginReply = 6,   ///< slot fd + where each staged buffer goes
  kSnapshotStaged = 7,       ///< client copied its staged buffers; daemon pulls device ones
  kSnapshotDone = 8,         ///< reply: every byte is in the slot (the fence)
  kQueryCommitted = 9,
  kQueryCommittedReply = 10,
  kRestore = 11,
  kRestoreReply = 12,        ///< step (or none) + slot fd + where each staged buffer is
  kRestoreDone = 13,         ///< client finished copying out; daemon drops its reference
  kAck = 14,                 ///< empty reply
  kError = 15,               ///< reply: status code + message
  kSnapshotAbort = 16,       ///< client gave up a snapshot it began (copy failed)
  kHasAttach = 17,           ///< client shares its HAS hint page (memfd, has_hints.h); reply ack
  kRestoreStream = 18,       ///< daemon -> client before kRestoreReply: placements, data socket, ring
  kPlanQuery = 19,           ///< a job's plan document (no hello needed); the caller must own the job
  kPlanReply = 20,           ///< the document inline, or in a sealed memfd that rides with it
  /// The session's AOR state (AorStatusReply), answered at once by reftd's loop thread, not
  /// after the session's queued work; an older reftd answers "unknown message type".
  kAorStatus = 21,
  kAorStatusReply = 22,
  /// A trainer's or launcher's suspicion that a node of its job failed (no hello needed; the
  /// caller must own the job): reftd looks into it, never declares a death on it alone.
  kFailureReport = 23,
  kFailureReportReply = 24,  ///< the nodes now being looked into
};
constexpr uint16_t kMaxMessageType = 24;

/// \brief "hello", "snapshot_begin", ... or "unknown".
const char* MessageTypeName(MessageType type);

/// \brief Hard limits on everything a peer can make the other side read or allocate
/// (docs/failure-model.md "Inputs reftd does not trust"). The defaults are what the daemon enforces; both sides share them.
struct Limits {
  uint32_t max_payload_bytes = 64 * 1024;  ///< a frame larger than this is rejected
  uint32_t max_fds_per_frame = 4;          ///< SCM_RIGHTS fds accepted per frame (<= 253)
  uint32_t max_buffers = 1024;             ///< registered buffers per session
  uint32_t max_name_bytes = 127;           ///< buffer name (a store region name)
  uint32_t max_string_bytes = 255;         ///< job id, dtype, protection, version strings
  uint32_t max_handle_bytes = 256;         ///< opaque IPC handle bytes
};

struct FrameHeader {
  uint32_t magic = kFrameMagic;
  uint16_t version = kProtocolVersion;
  MessageType type = MessageType::kAck;
  uint32_t flags = 0;  ///< no flags defined in version 1: must be 0
  uint32_t request_id = 0;
  uint32_t payload_length = 0;
};

/// \brief Writes the 24 header bytes to `out`.
void EncodeHeader(const FrameHeader& header, uint8_t* out);
/// \brief Parses and validates a header: magic, version (any for kError), known type, zero
/// flags/reserved, and payload_length == `payload_bytes_present` <= limits.max_payload_bytes.
Result<FrameHeader> DecodeHeader(const uint8_t* data, size_t size, size_t payload_bytes_present,
                                 const Limits& limits);

}  // namespace reft::local_proto
