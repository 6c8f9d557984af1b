#pragma once
/// \file grpc_auth.h
/// \brief Transport security of every gRPC endpoint (Peer, Admin) and of their clients (peers,
/// reftctl): mutual TLS and/or a shared token read from a file. Plain text without credentials
/// is allowed only when every address is loopback, a token only over TLS beyond loopback, unless
/// the operator says so explicitly. The per-call check is security::Authorizer (authorizer.h).

#include <memory>
#include <string>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "reft/result.h"

namespace reft::security {

/// Metadata key and value prefix that carry the shared token on every call.
inline constexpr char kTokenHeader[] = "authorization";
inline constexpr char kTokenPrefix[] = "Bearer ";

struct SecurityOptions {
  std::string tls_cert;  ///< PEM certificate of this node (server and client side)
  std::string tls_key;   ///< PEM private key
  std::string tls_ca;    ///< PEM CA bundle that peers' / clients' certificates must chain to
  std::string token_file;  ///< file whose first line is the shared token
  bool allow_insecure = false;  ///< plain text on non-loopback addresses (logged as a warning)
  /// Group whose members may use the admin Unix socket besides root and the daemon's own uid
  /// (checked with SO_PEERCRED); "" = nobody else.
  std::string operator_group;
  /// Under mutual TLS, the client certificates that may make Admin calls over TCP: each entry
  /// is matched against a certificate's URI and DNS subject alternative names, or its common
  /// name when it has neither (tools/reft-certs.sh's operator certificate: "reft-operator").
  /// Required with TLS: the CA signs every node's certificate too, and a node is no operator.
  std::vector<std::string> operator_identities;

  bool tls() const { return !tls_cert.empty(); }
};

/// \brief True for unix: targets and for an address whose host is an IPv4 literal in
/// 127.0.0.0/8, the IPv6 literal ::1 (bracketed or not), or exactly "localhost". Any other name
/// is not loopback, whatever it would resolve to: nothing is resolved ("127.evil.example.com"
/// is a name like any other).
bool IsLoopbackAddress(const std::string& address);

/// \brief The host of "host:port", "[v6]:port", "[v6]", a bare IPv6 literal or a bare host
/// (a gRPC "ipv4:"/"ipv6:" scheme dropped); "" when brackets do not close or are followed by
/// anything but ":port".
std::string HostOfAddress(const std::string& address);

/// \brief Checks the combination: TLS needs cert, key and CA together; without TLS, every
/// address must be loopback unless allow_insecure: with neither TLS nor a token anyone on the
/// network could call, and a token without TLS travels in clear text (anyone who sees one call
/// can replay it). An operator_group must exist. Mutual TLS needs operator_identities (else
/// no certificate, or every one, would be an operator). InvalidArgument names the key and says
/// why.
Status ValidateSecurity(const SecurityOptions& options, const std::vector<std::string>& addresses);

/// \brief The token (first line, trailing whitespace removed). IoError / InvalidArgument name
/// the file, never the content.
Result<std::string> ReadTokenFile(const std::string& path);

Result<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(const SecurityOptions& o);
Result<std::shared_ptr<grpc::ChannelCredentials>> MakeChannelCredentials(const SecurityOptions& o);

/// \brief Adds the token to an outgoing call (metadata "authorization: Bearer <token>").
/// Done per call rather than with call credentials, which gRPC refuses on plain-text loopback.
void AttachToken(grpc::ClientContext* context, const std::string& token);

/// \brief The gid of group `name`; InvalidArgument naming `key` when there is none.
Result<uint32_t> LookupGroup(const std::string& name, const std::string& key);

}  // namespace reft::security
