#include "reft/security/grpc_auth.h"

#include <arpa/inet.h>
#include <grp.h>
#include <netinet/in.h>

#include <fstream>
#include <sstream>


namespace reft::security {
namespace {

constexpr size_t kMaxTokenBytes = 4096;

Result<std::string> ReadPem(const std::string& path, const char* key) {
  std::ifstream in(path);
  if (!in) return Status::InvalidArgument(std::string("security.") + key + ": cannot read '" + path + "'");
  std::stringstream ss;
  ss << in.rdbuf();
  if (ss.str().find("-----BEGIN") == std::string::npos) {
    return Status::InvalidArgument(std::string("security.") + key + ": '" + path + "' is not PEM");
  }
  return ss.str();
}

// Under mutual TLS every certificate the CA signed gets past the handshake, the nodes' too:
// Admin over TCP is for the certificates named here, and there must be some (an empty list
// would leave reftctl --addr refused on every node without saying why at start).
Status ValidateOperatorIdentities(const SecurityOptions& o) {
  for (const auto& id : o.operator_identities) {
    if (id.empty()) {
      return Status::InvalidArgument("security.operator_identities: an empty name matches no "
                                     "certificate");
    }
  }
  if (!o.tls() || !o.operator_identities.empty()) return Status::OK();
  return Status::InvalidArgument(
      "security.operator_identities: mutual TLS is on and no client certificate is named an "
      "operator, so Admin over TCP (reftctl --addr) would be refused to everyone; list the "
      "operator certificates' names (URI or DNS subject alternative name, else common name), "
      "e.g. [\"reft-operator\"] for the one tools/reft-certs.sh makes");
}

// Why a name that looks like loopback is not: it is never resolved.
std::string NotResolved(const std::string& address) {
  const std::string host = HostOfAddress(address);
  in6_addr any{};
  if (::inet_pton(AF_INET, host.c_str(), &any) == 1 ||
      ::inet_pton(AF_INET6, host.c_str(), &any) == 1) {
    return "";
  }
  return " (only IP literals in 127.0.0.0/8, ::1 and 'localhost' are; a host name is not "
         "resolved to find out)";
}

}  // namespace

std::string HostOfAddress(const std::string& address) {
  std::string a = address;
  for (const char* scheme : {"ipv4:", "ipv6:"}) {
    if (a.rfind(scheme, 0) == 0) a = a.substr(5);
  }
  if (!a.empty() && a.front() == '[') {
    const auto close = a.find(']');
    if (close == std::string::npos || (close + 1 < a.size() && a[close + 1] != ':')) return "";
    return a.substr(1, close - 1);
  }
  // One colon: host:port. More: a bare IPv6 literal ("::1"), which has no port without brackets.
  const auto colon = a.find(':');
  if (colon != std::string::npos && a.find(':', colon + 1) == std::string::npos) {
    return a.substr(0, colon);
  }
  return a;
}

bool IsLoopbackAddress(const std::string& address) {
  if (address.rfind("unix:", 0) == 0) return true;
  const std::string host = HostOfAddress(address);
  if (host == "localhost") return true;
  // Literals only, parsed strictly (inet_pton takes exactly four decimal parts): a name that
  // merely starts with "127." resolves wherever its owner wants.
  in_addr v4{};
  if (::inet_pton(AF_INET, host.c_str(), &v4) == 1) return (ntohl(v4.s_addr) >> 24) == 127;
  in6_addr v6{};
  return ::inet_pton(AF_INET6, host.c_str(), &v6) == 1 && IN6_IS_ADDR_LOOPBACK(&v6);
}

Status ValidateSecurity(const SecurityOptions& o, const std::vector<std::string>& addresses) {
  const bool any_tls = !o.tls_cert.empty() || !o.tls_key.empty() || !o.tls_ca.empty();
  if (any_tls && (o.tls_cert.empty() || o.tls_key.empty() || o.tls_ca.empty())) {
    return Status::InvalidArgument(
        "security: tls_cert, tls_key and tls_ca must be given together (mutual TLS)");
  }
  if (!o.operator_group.empty()) {
    REFT_RETURN_NOT_OK(LookupGroup(o.operator_group, "security.operator_group").status());
  }
  REFT_RETURN_NOT_OK(ValidateOperatorIdentities(o));
  if (o.tls() || o.allow_insecure) return Status::OK();
  for (const auto& a : addresses) {
    if (IsLoopbackAddress(a)) continue;
    if (!o.token_file.empty()) {
      return Status::InvalidArgument(
          "security: '" + a + "' is not a loopback address" + NotResolved(a) +
          " and there is no TLS: the token would travel in clear text, so anyone on the "
          "network could read it and replay it; configure mutual TLS "
          "(security.tls_cert/tls_key/tls_ca), or set security.allow_insecure = true");
    }
    return Status::InvalidArgument(
        "security: '" + a + "' is not a loopback address" + NotResolved(a) +
        "; configure [security] tls_cert/tls_key/tls_ca or token_file, or set "
        "security.allow_insecure = true");
  }
  return Status::OK();
}

Result<uint32_t> LookupGroup(const std::string& name, const std::string& key) {
  std::vector<char> buf(16384);
  struct group g;
  struct group* found = nullptr;
  if (getgrnam_r(name.c_str(), &g, buf.data(), buf.size(), &found) != 0 || found == nullptr) {
    return Status::InvalidArgument(key + ": no group named '" + name + "'");
  }
  return static_cast<uint32_t>(found->gr_gid);
}

Result<std::string> ReadTokenFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return Status::InvalidArgument("security.token_file: cannot read '" + path + "'");
  std::string token;
  std::getline(in, token);
  while (!token.empty() && std::isspace(static_cast<unsigned char>(token.back()))) token.pop_back();
  if (token.size() < 16 || token.size() > kMaxTokenBytes) {
    return Status::InvalidArgument("security.token_file: '" + path +
                                   "' must hold a token of 16 to 4096 characters on its first line");
  }
  return token;
}

Result<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(const SecurityOptions& o) {
  if (!o.tls()) return grpc::InsecureServerCredentials();
  REFT_ASSIGN_OR_RETURN(std::string cert, ReadPem(o.tls_cert, "tls_cert"));
  REFT_ASSIGN_OR_RETURN(std::string key, ReadPem(o.tls_key, "tls_key"));
  REFT_ASSIGN_OR_RETURN(std::string ca, ReadPem(o.tls_ca, "tls_ca"));
  grpc::SslServerCredentialsOptions ssl(GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  ssl.pem_root_certs = ca;
  ssl.pem_key_cert_pairs.push_back({key, cert});
  return grpc::SslServerCredentials(ssl);
}

Result<std::shared_ptr<grpc::ChannelCredentials>> MakeChannelCredentials(const SecurityOptions& o) {
  if (!o.tls()) return grpc::InsecureChannelCredentials();
  grpc::SslCredentialsOptions ssl;
  REFT_ASSIGN_OR_RETURN(ssl.pem_root_certs, ReadPem(o.tls_ca, "tls_ca"));
  REFT_ASSIGN_OR_RETURN(ssl.pem_cert_chain, ReadPem(o.tls_cert, "tls_cert"));
  REFT_ASSIGN_OR_RETURN(ssl.pem_private_key, ReadPem(o.tls_key, "tls_key"));
  return grpc::SslCredentials(ssl);
}

void AttachToken(grpc::ClientContext* context, const std::string& token) {
  if (!token.empty()) context->AddMetadata(kTokenHeader, std::string(kTokenPrefix) + token);
}

}  // namespace reft::security
