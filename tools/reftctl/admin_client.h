#pragma once
/// \file admin_client.h
/// \brief reftctl's connection to a daemon's Admin service, with the exit-code mapping of
/// docs/protocol.md "reftctl" (3 = cannot reach the daemon, 1 = the operation failed).

#include <memory>
#include <string>

#include <grpcpp/grpcpp.h>

#include "command.h"
#include "reft/v1/admin.grpc.pb.h"

namespace reft::ctl {

/// \brief The gRPC target for the context: "unix:<socket>.admin" when --socket is given,
/// else --addr, else $REFT_ADDR, else 127.0.0.1:7070.
std::string AdminTarget(const CtlContext& ctx);

std::unique_ptr<v1::Admin::Stub> MakeAdminStub(const CtlContext& ctx);

/// \brief A client context with a deadline (seconds) for one call, carrying the shared token
/// when one is configured. Failing to read the token file is reported through ctx.Fail
/// (exit 2) and returns null.
std::unique_ptr<grpc::ClientContext> MakeCallContext(CtlContext& ctx, double timeout_s = 10);

/// \brief Reports a failed RPC through ctx.Fail with the right exit code; returns false then.
bool CheckRpc(CtlContext& ctx, const grpc::Status& status, const std::string& what);

}  // namespace reft::ctl
