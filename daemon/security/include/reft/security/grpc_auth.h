#pragma once
/// \file grpc_auth.h
/// \brief Authentication of every gRPC endpoint (Peer, Admin) and of their clients (peers,
/// reftctl): mutual TLS and/or a shared token read from a file. Plain text is allowed only
/// when every address is loopback, or when the operator says so explicitly.

#include <memory>
#include <string>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "reft/result.h"

namespace reft::security {

struct SecurityOptions {
  std::string tls_cert;  ///< PEM certificate of this node (server and client side)
  std::string tls_key;   ///< PEM private key
  std::string tls_ca;    ///< PEM CA bundle that peers' / clients' certificates must chain to
  std::string token_file;  ///< file whose first line is the shared token
  bool allow_insecure = false;  ///< plain text on non-loopback addresses (logged as a warning)

  bool tls() const { return !tls_cert.empty(); }
};

/// \brief True for 127.0.0.0/8, [::1], localhost and unix: targets.
bool IsLoopbackAddress(const std::string& address);

/// \brief Checks the combination: TLS needs cert, key and CA together; without TLS or a token,
/// every address must be loopback unless allow_insecure. InvalidArgument names the key.
Status ValidateSecurity(const SecurityOptions& options, const std::vector<std::string>& addresses);

/// \brief The token (first line, trailing whitespace removed). IoError / InvalidArgument name
/// the file, never the content.
Result<std::string> ReadTokenFile(const std::string& path);

Result<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(const SecurityOptions& o);
Result<std::shared_ptr<grpc::ChannelCredentials>> MakeChannelCredentials(const SecurityOptions& o);

/// \brief Adds the token to an outgoing call (metadata "authorization: Bearer <token>").
/// Done per call rather than with call credentials, which gRPC refuses on plain-text loopback.
void AttachToken(grpc::ClientContext* context, const std::string& token);

/// \brief Server-side token check for one call. Empty token = no token required.
/// Thread-safe, immutable.
class TokenAuthorizer {
 public:
  explicit TokenAuthorizer(std::string token) : token_(std::move(token)) {}
  /// \brief OK, or UNAUTHENTICATED naming the method and the peer (never the secret); the
  /// refusal is logged once per call.
  grpc::Status Check(grpc::ServerContext* context, const char* method) const;
  bool enabled() const { return !token_.empty(); }

 private:
  std::string token_;
};

}  // namespace reft::security
