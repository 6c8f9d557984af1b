#pragma once
/// \file reftd_socket.h
/// \brief The socket a client connects to (socket=, else REFT_SOCKET, else the default path)
/// and the connection to it, whose failure names the path, where it came from and the fix.

#include <chrono>
#include <string>
#include <vector>

#include "reft/local_proto/socket.h"
#include "reft/result.h"
#include "reft/unique_fd.h"

namespace reft::client {

inline constexpr const char* kDefaultSocket = "/run/reft/reftd.sock";

/// \brief `given` when not empty, else $REFT_SOCKET when set and not empty, else kDefaultSocket.
std::string ReftdSocketPath(const std::string& given);

/// \brief A connection to the reftd serving `path`. Unavailable when nothing is there (no
/// socket: reftd not running or serving another path), when nobody listens on the socket
/// (reftd stopped and left it), or PermissionDenied when this user may not open it; each
/// message names the path, whether it came from REFT_SOCKET or is the default, and the fix.
Result<UniqueFd> ConnectReftd(const std::string& path);

/// \brief One request on a connection of its own, with no hello (plan_query, failure_report):
/// connects to the reftd at `socket_path` (ReftdSocketPath), sends `payload` as `type` and
/// returns the `reply_type` frame. A reftd older than this libreft answers "unknown message
/// type": the error then says that it does not answer `what` (older than libreft?).
Result<local_proto::Frame> CallReftdOnce(const std::string& socket_path,
                                         std::chrono::milliseconds timeout,
                                         local_proto::MessageType type,
                                         const std::vector<uint8_t>& payload,
                                         local_proto::MessageType reply_type, const char* what);

}  // namespace reft::client
