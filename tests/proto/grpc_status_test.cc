// The one Status <-> gRPC mapping (docs/protocol.md "Status codes"): every reft code survives
// the round trip exactly through the reft-code trailer, and maps by the gRPC code alone as the
// table says when a status carries no trailer.
#include <catch2/catch.hpp>

#include <grpcpp/client_context.h>
#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>
#include <grpcpp/security/server_credentials.h>
#include <grpcpp/server_builder.h>

#include <chrono>
#include <memory>

#include "reft/proto/grpc_status.h"
#include "reft/v1/admin.grpc.pb.h"

using reft::Status;
using reft::StatusCode;
using reft::proto::FromGrpc;
using reft::proto::GrpcCode;
using reft::proto::ToGrpc;

namespace {

constexpr int kCodes = static_cast<int>(StatusCode::kInternal) + 1;

}  // namespace

TEST_CASE("every reft code has the gRPC code of the table", "[proto][grpc_status]") {
  using G = grpc::StatusCode;
  const std::pair<StatusCode, G> table[] = {
      {StatusCode::kOk, G::OK},
      {StatusCode::kInvalidArgument, G::INVALID_ARGUMENT},
      {StatusCode::kNotFound, G::NOT_FOUND},
      {StatusCode::kAlreadyExists, G::ALREADY_EXISTS},
      {StatusCode::kOutOfMemory, G::RESOURCE_EXHAUSTED},
      {StatusCode::kCorrupted, G::DATA_LOSS},
      {StatusCode::kUnavailable, G::UNAVAILABLE},
      {StatusCode::kTimeout, G::DEADLINE_EXCEEDED},
      {StatusCode::kPermissionDenied, G::PERMISSION_DENIED},
      {StatusCode::kLost, G::DATA_LOSS},
      {StatusCode::kIoError, G::INTERNAL},
      {StatusCode::kProtocol, G::FAILED_PRECONDITION},
      {StatusCode::kBusy, G::RESOURCE_EXHAUSTED},
      {StatusCode::kCancelled, G::CANCELLED},
      {StatusCode::kUnsupported, G::UNIMPLEMENTED},
      {StatusCode::kInternal, G::INTERNAL},
  };
  REQUIRE(std::size(table) == static_cast<size_t>(kCodes));
  for (const auto& [reft_code, grpc_code] : table) {
    INFO(reft::StatusCodeName(reft_code));
    CHECK(GrpcCode(reft_code) == grpc_code);
    if (reft_code == StatusCode::kOk) continue;
    const grpc::Status g = ToGrpc(Status(reft_code, "what went wrong"));
    CHECK(g.error_code() == grpc_code);
    CHECK(g.error_message() == "what went wrong");
  }
  CHECK(ToGrpc(Status::OK()).ok());
}

TEST_CASE("without the trailer a gRPC code maps back by the table", "[proto][grpc_status]") {
  using G = grpc::StatusCode;
  const std::pair<G, StatusCode> back[] = {
      {G::INVALID_ARGUMENT, StatusCode::kInvalidArgument},
      {G::OUT_OF_RANGE, StatusCode::kInvalidArgument},
      {G::NOT_FOUND, StatusCode::kNotFound},
      {G::RESOURCE_EXHAUSTED, StatusCode::kBusy},
      {G::DATA_LOSS, StatusCode::kCorrupted},
      {G::UNAUTHENTICATED, StatusCode::kPermissionDenied},
      {G::FAILED_PRECONDITION, StatusCode::kProtocol},
      {G::UNAVAILABLE, StatusCode::kUnavailable},
      {G::DEADLINE_EXCEEDED, StatusCode::kTimeout},
      {G::UNKNOWN, StatusCode::kInternal},
      {G::ABORTED, StatusCode::kInternal},
  };
  for (const auto& [grpc_code, reft_code] : back) {
    const Status s = FromGrpc(grpc::Status(grpc_code, "no"), "Ping n1");
    INFO(static_cast<int>(grpc_code));
    CHECK(s.code() == reft_code);
    CHECK(s.message() == "Ping n1: no");
  }
  CHECK(FromGrpc(grpc::Status::OK, "Ping n1").ok());
}

namespace {

// A real Admin service on loopback whose Status RPC fails with the code the test asks for.
class FailingAdmin final : public reft::v1::Admin::Service {
 public:
  StatusCode code = StatusCode::kInternal;
  grpc::Status Status(grpc::ServerContext* ctx, const reft::v1::StatusRequest*,
                      reft::v1::StatusResponse*) override {
    return ToGrpc(reft::Status(code, "m"), ctx);
  }
};

}  // namespace

TEST_CASE("the reft-code trailer makes every code round-trip exactly", "[proto][grpc_status]") {
  FailingAdmin service;
  int port = 0;
  grpc::ServerBuilder builder;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  REQUIRE(server != nullptr);
  auto stub = reft::v1::Admin::NewStub(grpc::CreateChannel(
      "127.0.0.1:" + std::to_string(port), grpc::InsecureChannelCredentials()));
  for (int c = 1; c < kCodes; ++c) {
    service.code = static_cast<StatusCode>(c);
    INFO(reft::StatusCodeName(service.code));
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    reft::v1::StatusRequest req;
    reft::v1::StatusResponse resp;
    const grpc::Status wire = stub->Status(&ctx, req, &resp);
    CHECK(wire.error_code() == GrpcCode(service.code));
    const Status back = FromGrpc(wire, "Status", &ctx);
    CHECK(back.code() == service.code);  // exact, even where gRPC codes are shared
    CHECK(back.message() == "Status: m");
  }
  server->Shutdown();
}
