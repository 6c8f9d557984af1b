#pragma once
/// \file grpc_status.h
/// \brief The one mapping between reft::Status and grpc::Status, for every gRPC service reftd
/// serves (Peer, Admin) and every client of them (peers, reftctl). The table is in
/// docs/protocol.md "Status codes".
///
/// A reft code travels as the nearest gRPC code; since several reft codes share one gRPC code
/// (out_of_memory and busy, corrupted and lost), the server also sends the exact reft code in
/// the `reft-code` trailing metadata, which FromGrpc prefers when the client context has it.

#include <grpcpp/client_context.h>
#include <grpcpp/server_context.h>
#include <grpcpp/support/status.h>

#include <string>

#include "reft/status.h"

namespace reft::proto {

/// \brief Name of the trailing metadata carrying StatusCodeName() of the reft code.
inline constexpr const char* kReftCodeTrailer = "reft-code";

/// \brief The gRPC code `code` travels as.
grpc::StatusCode GrpcCode(StatusCode code);

/// \brief `s` as a gRPC status (its message unchanged). With a server context, the exact reft
/// code is added as the `reft-code` trailer.
grpc::Status ToGrpc(const Status& s, grpc::ServerContext* ctx = nullptr);

/// \brief The reft status of a finished call, its message prefixed with `what` (the call and
/// the peer, e.g. "Ping 127.0.0.1:4000"). The `reft-code` trailer of `ctx` wins when present;
/// otherwise the gRPC code is mapped back (RESOURCE_EXHAUSTED -> busy, DATA_LOSS -> corrupted,
/// UNAUTHENTICATED -> permission_denied, OUT_OF_RANGE -> invalid_argument, unknown -> internal).
Status FromGrpc(const grpc::Status& s, const std::string& what,
                const grpc::ClientContext* ctx = nullptr);

}  // namespace reft::proto
