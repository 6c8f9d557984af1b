#pragma once
/// \file socket.h
/// \brief Sending and receiving one frame (+ fds) on an AF_UNIX SOCK_SEQPACKET socket.
/// Thread-safety: SendFrame may be called concurrently with RecvFrame on the same socket;
/// callers serialise their own sends.

#include <cstdint>
#include <vector>

#include "reft/local_proto/frame.h"
#include "reft/unique_fd.h"
#include "reft/result.h"

namespace reft::local_proto {

struct Frame {
  FrameHeader header;
  std::vector<uint8_t> payload;
  std::vector<UniqueFd> fds;  ///< received with SCM_RIGHTS (close-on-exec)
};

/// \brief Sends one frame. `fds` are passed with SCM_RIGHTS and stay owned by the caller.
/// MSG_NOSIGNAL: a dead peer yields Unavailable, never SIGPIPE.
Status SendFrame(int sock, MessageType type, uint32_t request_id,
                 const std::vector<uint8_t>& payload, const std::vector<int>& fds = {});

/// \brief Receives one frame, rejecting (Protocol) oversized or truncated frames, bad headers,
/// truncated ancillary data (MSG_CTRUNC) and more fds than limits.max_fds_per_frame.
/// Unavailable when the peer hung up. Any fds that arrived with a rejected frame are closed.
/// `timeout_ms` < 0 waits forever; Timeout when nothing arrived in time.
Result<Frame> RecvFrame(int sock, const Limits& limits, int timeout_ms = -1);

/// \brief A connected SOCK_SEQPACKET socket to `path` (close-on-exec). When connect() fails
/// (Unavailable) its errno goes to `connect_errno`, if given, for a caller that explains it.
Result<UniqueFd> ConnectSeqpacket(const std::string& path, int* connect_errno = nullptr);

}  // namespace reft::local_proto
