#include "reft/status.h"

#include <cstring>

namespace reft {

const char* StatusCodeName(StatusCode code) {
  switch (code) {
    case StatusCode::kOk: return "ok";
    case StatusCode::kInvalidArgument: return "invalid_argument";
    case StatusCode::kNotFound: return "not_found";
    case StatusCode::kAlreadyExists: return "already_exists";
    case StatusCode::kOutOfMemory: return "out_of_memory";
    case StatusCode::kCorrupted: return "corrupted";
    case StatusCode::kUnavailable: return "unavailable";
    case StatusCode::kTimeout: return "timeout";
    case StatusCode::kPermissionDenied: return "permission_denied";
    case StatusCode::kLost: return "lost";
    case StatusCode::kIoError: return "io_error";
    case StatusCode::kProtocol: return "protocol";
    case StatusCode::kBusy: return "busy";
    case StatusCode::kCancelled: return "cancelled";
    case StatusCode::kUnsupported: return "unsupported";
    case StatusCode::kInternal: return "internal";
  }
  return "unknown";
}

Status::Status(StatusCode code, std::string message) {
  if (code != StatusCode::kOk) {
    state_ = std::make_shared<const State>(State{code, std::move(message)});
  }
}

Status Status::FromErrno(int err, const std::string& what) {
  return Status(StatusCode::kIoError, what + ": " + std::strerror(err));
}

const std::string& Status::message() const {
  static const std::string kEmpty;
  return state_ ? state_->message : kEmpty;
}

std::string Status::ToString() const {
  if (ok()) return "ok";
  return std::string(StatusCodeName(code())) + ": " + state_->message;
}

Status Status::WithContext(const std::string& context) const {
  if (ok()) return *this;
  return Status(code(), context + ": " + message());
}

}  // namespace reft
