#include "reft/proto/grpc_status.h"

namespace reft::proto {

namespace {

constexpr int kLastCode = static_cast<int>(StatusCode::kInternal);

// The reft code named by a `reft-code` trailer; kOk when the name is unknown.
StatusCode CodeNamed(const std::string& name) {
  for (int c = 1; c <= kLastCode; ++c) {
    if (name == StatusCodeName(static_cast<StatusCode>(c))) return static_cast<StatusCode>(c);
  }
  return StatusCode::kOk;
}

StatusCode FromGrpcCode(grpc::StatusCode code) {
  using G = grpc::StatusCode;
  switch (code) {
    case G::OK:
      return StatusCode::kOk;
    case G::INVALID_ARGUMENT:
    case G::OUT_OF_RANGE:
      return StatusCode::kInvalidArgument;
    case G::NOT_FOUND:
      return StatusCode::kNotFound;
    case G::ALREADY_EXISTS:
      return StatusCode::kAlreadyExists;
    case G::RESOURCE_EXHAUSTED:
      return StatusCode::kBusy;
    case G::DATA_LOSS:
      return StatusCode::kCorrupted;
    case G::DEADLINE_EXCEEDED:
      return StatusCode::kTimeout;
    case G::PERMISSION_DENIED:
    case G::UNAUTHENTICATED:
      return StatusCode::kPermissionDenied;
    case G::FAILED_PRECONDITION:
      return StatusCode::kProtocol;
    case G::CANCELLED:
      return StatusCode::kCancelled;
    case G::UNIMPLEMENTED:
      return StatusCode::kUnsupported;
    case G::UNAVAILABLE:
      return StatusCode::kUnavailable;
    default:
      return StatusCode::kInternal;
  }
}

}  // namespace

grpc::StatusCode GrpcCode(StatusCode code) {
  using G = grpc::StatusCode;
  switch (code) {
    case StatusCode::kOk:
      return G::OK;
    case StatusCode::kInvalidArgument:
      return G::INVALID_ARGUMENT;
    case StatusCode::kNotFound:
      return G::NOT_FOUND;
    case StatusCode::kAlreadyExists:
      return G::ALREADY_EXISTS;
    case StatusCode::kOutOfMemory:
      return G::RESOURCE_EXHAUSTED;
    case StatusCode::kCorrupted:
      return G::DATA_LOSS;
    case StatusCode::kUnavailable:
      return G::UNAVAILABLE;
    case StatusCode::kTimeout:
      return G::DEADLINE_EXCEEDED;
    case StatusCode::kPermissionDenied:
      return G::PERMISSION_DENIED;
    case StatusCode::kLost:
      return G::DATA_LOSS;
    case StatusCode::kIoError:
      return G::INTERNAL;
    case StatusCode::kProtocol:
      return G::FAILED_PRECONDITION;
    case StatusCode::kBusy:
      return G::RESOURCE_EXHAUSTED;
    case StatusCode::kCancelled:
      return G::CANCELLED;
    case StatusCode::kUnsupported:
      return G::UNIMPLEMENTED;
    case StatusCode::kInternal:
      return G::INTERNAL;
  }
  return G::INTERNAL;
}

grpc::Status ToGrpc(const Status& s, grpc::ServerContext* ctx) {
  if (s.ok()) return grpc::Status::OK;
  if (ctx != nullptr) ctx->AddTrailingMetadata(kReftCodeTrailer, StatusCodeName(s.code()));
  return grpc::Status(GrpcCode(s.code()), s.message());
}

Status FromGrpc(const grpc::Status& s, const std::string& what, const grpc::ClientContext* ctx) {
  if (s.ok()) return Status::OK();
  StatusCode code = StatusCode::kOk;
  if (ctx != nullptr) {
    const auto& trailers = ctx->GetServerTrailingMetadata();
    auto it = trailers.find(kReftCodeTrailer);
    if (it != trailers.end()) code = CodeNamed(std::string(it->second.data(), it->second.size()));
  }
  if (code == StatusCode::kOk) code = FromGrpcCode(s.error_code());
  if (code == StatusCode::kOk) code = StatusCode::kInternal;  // an error must stay an error
  return Status(code, what + ": " + s.error_message());
}

}  // namespace reft::proto
