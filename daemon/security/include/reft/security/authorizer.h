#pragma once
/// \file authorizer.h
/// \brief The one per-call check of every gRPC call reftd serves, Admin and Peer alike
/// (docs/security.md):
///  - the shared token, when one is configured, on every call that arrives over TCP;
///  - under mutual TLS, a Peer call's claimed node id (its Caller) must be named by the
///    client certificate: its common name or one of its DNS subject alternative names
///    (the handshake already proved the certificate chains to the CA);
///  - under mutual TLS, an Admin call over TCP must present an operator's certificate: one
///    whose URI or DNS subject alternative names (else its common name) include a name of
///    `operator_identities` (every node's certificate chains to the same CA, and a node is not
///    an operator);
///  - over the admin Unix socket (OperatorSocket), the connection's uid must be an
///    operator's; Peer calls never come that way.
/// Refusals are UNAUTHENTICATED (no or wrong token, no certificate) or PERMISSION_DENIED
/// (identity mismatch, not an operator), with a message that names what was wrong but never
/// the secret. The first few are logged, a sustained stream at most once a second (with the
/// number left out), so a flood of bad calls cannot flood the log. Immutable after
/// construction; thread-safe.

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "reft/log_limiter.h"
#include "reft/mutex.h"
#include "reft/security/operator_socket.h"

namespace reft::security {

class Authorizer {
 public:
  /// `token` "" = no token required. `mutual_tls`: the TCP endpoint requires client
  /// certificates, so Peer callers are bound to them. `local`: the admin Unix socket whose
  /// connections are checked by uid (null = there is none; calls that claim to come from one
  /// are refused). `operator_identities`: under mutual TLS, the certificate names that may make
  /// Admin calls over TCP (security.operator_identities; none = nobody may).
  Authorizer(std::string token, bool mutual_tls, const OperatorSocket* local = nullptr,
             std::vector<std::string> operator_identities = {});

  /// \brief An Admin call (`method` e.g. "Admin/Status", for messages and logs).
  grpc::Status CheckAdmin(grpc::ServerContext* context, const char* method) const;
  /// \brief A Peer call whose request claims to come from node `claimed_node_id`.
  grpc::Status CheckPeer(grpc::ServerContext* context, const char* method,
                         const std::string& claimed_node_id) const;

  bool token_required() const { return !token_.empty(); }
  bool mutual_tls() const { return mutual_tls_; }
  /// \brief Calls refused so far (every reason).
  uint64_t refused() const { return refused_.load(); }

 private:
  grpc::Status CheckToken(grpc::ServerContext* context, const char* method) const;
  grpc::Status CheckOperatorCertificate(grpc::ServerContext* context, const char* method) const;
  grpc::Status Refuse(grpc::ServerContext* context, const char* method, grpc::StatusCode code,
                      const std::string& why) const;

  const std::string token_;
  const bool mutual_tls_;
  const OperatorSocket* local_;
  const std::vector<std::string> operator_identities_;
  mutable std::atomic<uint64_t> refused_{0};
  mutable LogLimiter log_limiter_;  ///< ten refusals logged at once, then one a second
};

/// \brief The names a verified client certificate carries: its common name and its DNS
/// subject alternative names (empty when the call has no certificate).
std::vector<std::string> CertificateNames(const grpc::AuthContext& auth);

/// \brief The names an operator certificate is known by: its URI and DNS subject alternative
/// names, or its common name when it has neither (the subject alternative names are the
/// certificate's identity where it has any, RFC 6125). Empty when the call has no certificate.
std::vector<std::string> OperatorCertificateNames(const grpc::AuthContext& auth);

/// \brief Compares without an early exit, so the time taken does not reveal a matching prefix.
bool ConstantTimeEquals(const std::string& a, const std::string& b);

}  // namespace reft::security
