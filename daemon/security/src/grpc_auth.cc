#include "reft/security/grpc_auth.h"

#include <fstream>
#include <sstream>

#include <spdlog/spdlog.h>

namespace reft::security {
namespace {

constexpr char kAuthHeader[] = "authorization";
constexpr char kBearer[] = "Bearer ";
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

// Compares without an early exit so the time taken does not reveal a matching prefix.
bool ConstantTimeEquals(const std::string& a, const std::string& b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  const size_t n = std::max(a.size(), b.size());
  for (size_t i = 0; i < n; ++i) {
    unsigned char x = i < a.size() ? static_cast<unsigned char>(a[i]) : 0;
    unsigned char y = i < b.size() ? static_cast<unsigned char>(b[i]) : 0;
    diff |= static_cast<unsigned char>(x ^ y);
  }
  return diff == 0;
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
  if (o.tls() || !o.token_file.empty() || o.allow_insecure) return Status::OK();
  for (const auto& a : addresses) {
    if (!IsLoopbackAddress(a)) {
      return Status::InvalidArgument(
          "security: '" + a + "' is not a loopback address; configure [security] tls_cert/"
          "tls_key/tls_ca or token_file, or set security.allow_insecure = true");
    }
  }
  return Status::OK();
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
  if (!token.empty()) context->AddMetadata(kAuthHeader, std::string(kBearer) + token);
}

grpc::Status TokenAuthorizer::Check(grpc::ServerContext* context, const char* method) const {
  if (token_.empty()) return grpc::Status::OK;
  const auto& md = context->client_metadata();
  auto it = md.find(kAuthHeader);
  std::string presented = it == md.end() ? "" : std::string(it->second.data(), it->second.size());
  const std::string expected = std::string(kBearer) + token_;
  if (ConstantTimeEquals(presented, expected)) return grpc::Status::OK;
  const char* why = it == md.end() ? "no token" : "wrong token";
  spdlog::warn("refused {} from {}: {}", method, context->peer(), why);
  return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                      std::string("refused: ") + why + " (set the shared token file)");
}

}  // namespace reft::security
