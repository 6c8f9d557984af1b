#pragma once
/// \file grpc_status.h
/// \brief reft::Status <-> grpc::Status mapping used by the Peer service and its client.

#include <grpcpp/support/status.h>

#include <string>

#include "reft/status.h"

namespace reft::peer {

/// Prefix of the FAILED_PRECONDITION message that tells a caller it was declared dead.
inline constexpr const char* kFencedPrefix = "fenced:";

grpc::Status ToGrpc(const Status& s);
/// `what` names the call and peer ("Ping 127.0.0.1:4000").
Status FromGrpc(const grpc::Status& s, const std::string& what);

}  // namespace reft::peer
