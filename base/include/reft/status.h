#pragma once
/// \file status.h
/// \brief Status and error codes shared by the daemon, the client library and the tools.
///
/// The numeric codes are part of the C ABI (reft/reft.h mirrors them one to one) and of
/// the wire (proto/reft/v1/common.proto ErrorCode); never renumber, only append.

#include <memory>
#include <ostream>
#include <string>
#include <utility>

namespace reft {

enum class StatusCode : int {
  kOk = 0,
  kInvalidArgument = 1,   ///< bad input from the caller; nothing changed
  kNotFound = 2,          ///< job, step, buffer or node unknown
  kAlreadyExists = 3,
  kOutOfMemory = 4,       ///< memory limit reached; nothing committed was evicted
  kCorrupted = 5,         ///< checksum or header mismatch detected
  kUnavailable = 6,       ///< daemon or peer cannot be reached
  kTimeout = 7,           ///< a deadline passed
  kPermissionDenied = 8,  ///< peer credentials, token or TLS refused
  kLost = 9,              ///< more failures than the protection tolerates
  kIoError = 10,          ///< filesystem or socket I/O failed
  kProtocol = 11,         ///< malformed message or incompatible protocol version
  kBusy = 12,             ///< resource in use (e.g. no free slot yet)
  kCancelled = 13,
  kUnsupported = 14,      ///< feature not built in or not possible on this memory
  kInternal = 15,         ///< a broken invariant; a bug
};

/// \brief Stable lowercase name of a code ("invalid_argument", ...), used in JSON and logs.
const char* StatusCodeName(StatusCode code);

/// \brief The outcome of an operation: OK, or a code with a human-readable message.
///
/// Cheap to copy when OK (no allocation). Messages say what failed and what the caller
/// can do about it, e.g. "memory limit 1.0 GiB reached: snapshot of 600 MiB refused".
class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message);

  static Status OK() { return Status(); }
  static Status InvalidArgument(std::string m) { return {StatusCode::kInvalidArgument, std::move(m)}; }
  static Status NotFound(std::string m) { return {StatusCode::kNotFound, std::move(m)}; }
  static Status AlreadyExists(std::string m) { return {StatusCode::kAlreadyExists, std::move(m)}; }
  static Status OutOfMemory(std::string m) { return {StatusCode::kOutOfMemory, std::move(m)}; }
  static Status Corrupted(std::string m) { return {StatusCode::kCorrupted, std::move(m)}; }
  static Status Unavailable(std::string m) { return {StatusCode::kUnavailable, std::move(m)}; }
  static Status Timeout(std::string m) { return {StatusCode::kTimeout, std::move(m)}; }
  static Status PermissionDenied(std::string m) { return {StatusCode::kPermissionDenied, std::move(m)}; }
  static Status Lost(std::string m) { return {StatusCode::kLost, std::move(m)}; }
  static Status IoError(std::string m) { return {StatusCode::kIoError, std::move(m)}; }
  static Status Protocol(std::string m) { return {StatusCode::kProtocol, std::move(m)}; }
  static Status Busy(std::string m) { return {StatusCode::kBusy, std::move(m)}; }
  static Status Cancelled(std::string m) { return {StatusCode::kCancelled, std::move(m)}; }
  static Status Unsupported(std::string m) { return {StatusCode::kUnsupported, std::move(m)}; }
  static Status Internal(std::string m) { return {StatusCode::kInternal, std::move(m)}; }
  /// \brief An IoError whose message ends with strerror(err).
  static Status FromErrno(int err, const std::string& what);

  bool ok() const { return state_ == nullptr; }
  StatusCode code() const { return state_ ? state_->code : StatusCode::kOk; }
  const std::string& message() const;
  /// \brief "code_name: message", or "ok".
  std::string ToString() const;
  /// \brief Returns a copy whose message is prefixed with `context + ": "`.
  Status WithContext(const std::string& context) const;

 private:
  struct State {
    StatusCode code;
    std::string message;
  };
  std::shared_ptr<const State> state_;
};

inline std::ostream& operator<<(std::ostream& os, const Status& s) { return os << s.ToString(); }

}  // namespace reft

#define REFT_CONCAT_IMPL(a, b) a##b
#define REFT_CONCAT(a, b) REFT_CONCAT_IMPL(a, b)

/// Returns the status from the enclosing function when it is not OK.
#define REFT_RETURN_NOT_OK(expr)              \
  do {                                        \
    ::reft::Status _reft_st = (expr);         \
    if (!_reft_st.ok()) return _reft_st;      \
  } while (0)
