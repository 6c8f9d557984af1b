#pragma once
/// \file reftd_socket.h
/// \brief The socket a client connects to (socket=, else REFT_SOCKET, else the default path)
/// and the connection to it, whose failure names the path, where it came from and the fix.

#include <string>

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

}  // namespace reft::client
