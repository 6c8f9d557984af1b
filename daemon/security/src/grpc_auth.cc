#include "reft/security/grpc_auth.h"

#include <grp.h>

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

}  // namespace

bool IsLoopbackAddress(const std::string& address) {
  if (address.rfind("unix:", 0) == 0) return true;
  std::string host = address;
  if (auto colon = host.rfind(':'); colon != std::string::npos && host.find(']') == std::string::npos) {
    host = host.substr(0, colon);
  } else if (host.front() == '[') {
    host = host.substr(1, host.find(']') - 1);
  }
  if (host.rfind("ipv4:", 0) == 0) host = host.substr(5);
  return host == "localhost" || host == "::1" || host.rfind("127.", 0) == 0;
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
  if (o.tls() || o.allow_insecure) return Status::OK();
  for (const auto& a : addresses) {
    if (IsLoopbackAddress(a)) continue;
    if (!o.token_file.empty()) {
      return Status::InvalidArgument(
          "security: '" + a + "' is not a loopback address and there is no TLS: the token would "
          "travel in clear text, so anyone on the network could read it and replay it; "
          "configure mutual TLS (security.tls_cert/tls_key/tls_ca), or set "
          "security.allow_insecure = true");
    }
    return Status::InvalidArgument(
        "security: '" + a + "' is not a loopback address; configure [security] tls_cert/"
        "tls_key/tls_ca or token_file, or set security.allow_insecure = true");
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
