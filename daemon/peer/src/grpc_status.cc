#include "grpc_status.h"

namespace reft::peer {

grpc::Status ToGrpc(const Status& s) {
  using G = grpc::StatusCode;
  G code = G::UNKNOWN;
  switch (s.code()) {
    case StatusCode::kOk: return grpc::Status::OK;
    case StatusCode::kInvalidArgument: code = G::INVALID_ARGUMENT; break;
    case StatusCode::kNotFound: code = G::NOT_FOUND; break;
    case StatusCode::kAlreadyExists: code = G::ALREADY_EXISTS; break;
    case StatusCode::kOutOfMemory: code = G::RESOURCE_EXHAUSTED; break;
    case StatusCode::kCorrupted: code = G::DATA_LOSS; break;
    case StatusCode::kUnavailable: code = G::UNAVAILABLE; break;
    case StatusCode::kTimeout: code = G::DEADLINE_EXCEEDED; break;
    case StatusCode::kPermissionDenied: code = G::PERMISSION_DENIED; break;
    case StatusCode::kProtocol: code = G::FAILED_PRECONDITION; break;
    case StatusCode::kBusy: code = G::RESOURCE_EXHAUSTED; break;
    case StatusCode::kCancelled: code = G::CANCELLED; break;
    case StatusCode::kUnsupported: code = G::UNIMPLEMENTED; break;
    default: code = G::INTERNAL; break;
  }
  return grpc::Status(code, s.message());
}

Status FromGrpc(const grpc::Status& s, const std::string& what) {
  using G = grpc::StatusCode;
  std::string m = what + ": " + s.error_message();
  switch (s.error_code()) {
    case G::OK: return Status::OK();
    case G::INVALID_ARGUMENT: return Status::InvalidArgument(m);
    case G::NOT_FOUND: return Status::NotFound(m);
    case G::OUT_OF_RANGE: return Status::InvalidArgument(m);
    case G::ALREADY_EXISTS: return Status::AlreadyExists(m);
    case G::RESOURCE_EXHAUSTED: return Status::Busy(m);
    case G::DATA_LOSS: return Status::Corrupted(m);
    case G::DEADLINE_EXCEEDED: return Status::Timeout(m);
    case G::PERMISSION_DENIED:
    case G::UNAUTHENTICATED: return Status::PermissionDenied(m);
    case G::FAILED_PRECONDITION: return Status::Protocol(m);
    case G::CANCELLED: return Status::Cancelled(m);
    case G::UNIMPLEMENTED: return Status::Unsupported(m);
    case G::UNAVAILABLE: return Status::Unavailable(m);
    default: return Status::Internal(m);
  }
}

}  // namespace reft::peer
