#include "reft/security/authorizer.h"

#include <algorithm>

#include <grpc/grpc_security_constants.h>
#include <spdlog/spdlog.h>

#include "reft/security/grpc_auth.h"

namespace reft::security {
namespace {

constexpr char kLocalPeerPrefix[] = "fd:";  // gRPC's peer string of a connection handed over by fd

std::string Join(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "'" : ", '") + n + "'";
  return out.empty() ? "no name" : out;
}

}  // namespace

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

std::vector<std::string> CertificateNames(const grpc::AuthContext& auth) {
  std::vector<std::string> names;
  if (!auth.IsPeerAuthenticated()) return names;
  for (const char* property : {GRPC_X509_CN_PROPERTY_NAME, GRPC_PEER_DNS_PROPERTY_NAME}) {
    for (const auto& v : auth.FindPropertyValues(property)) {
      std::string name(v.data(), v.size());
      if (std::find(names.begin(), names.end(), name) == names.end()) names.push_back(name);
    }
  }
  return names;
}

std::vector<std::string> OperatorCertificateNames(const grpc::AuthContext& auth) {
  std::vector<std::string> names;
  if (!auth.IsPeerAuthenticated()) return names;
  for (const char* property : {GRPC_PEER_URI_PROPERTY_NAME, GRPC_PEER_DNS_PROPERTY_NAME}) {
    for (const auto& v : auth.FindPropertyValues(property)) names.emplace_back(v.data(), v.size());
  }
  if (!names.empty()) return names;
  for (const auto& v : auth.FindPropertyValues(GRPC_X509_CN_PROPERTY_NAME)) {
    names.emplace_back(v.data(), v.size());
  }
  return names;
}

Authorizer::Authorizer(std::string token, bool mutual_tls, const OperatorSocket* local,
                       std::vector<std::string> operator_identities)
    : token_(std::move(token)),
      mutual_tls_(mutual_tls),
      local_(local),
      operator_identities_(std::move(operator_identities)) {}

grpc::Status Authorizer::Refuse(grpc::ServerContext* context, const char* method,
                                grpc::StatusCode code, const std::string& why) const {
  refused_.fetch_add(1);
  if (uint64_t unlogged = 0; log_limiter_.Admit(&unlogged)) {
    if (unlogged > 0) {
      spdlog::warn("refused {} from {}: {} ({} earlier refusals not logged)", method,
                   context->peer(), why, unlogged);
    } else {
      spdlog::warn("refused {} from {}: {}", method, context->peer(), why);
    }
  }
  return grpc::Status(code, std::string("refused: ") + why);
}

grpc::Status Authorizer::CheckToken(grpc::ServerContext* context, const char* method) const {
  if (token_.empty()) return grpc::Status::OK;
  const auto& md = context->client_metadata();
  auto it = md.find(kTokenHeader);
  std::string presented = it == md.end() ? "" : std::string(it->second.data(), it->second.size());
  if (ConstantTimeEquals(presented, std::string(kTokenPrefix) + token_)) return grpc::Status::OK;
  return Refuse(context, method, grpc::StatusCode::UNAUTHENTICATED,
                std::string(it == md.end() ? "no token" : "wrong token") +
                    " (set the shared token file)");
}

grpc::Status Authorizer::CheckAdmin(grpc::ServerContext* context, const char* method) const {
  const std::string peer = context->peer();
  if (peer.rfind(kLocalPeerPrefix, 0) == 0) {
    auto local = local_ ? local_->Find(peer) : std::nullopt;
    if (!local) {
      return Refuse(context, method, grpc::StatusCode::PERMISSION_DENIED,
                    "unknown local connection " + peer);
    }
    if (local->operator_) return grpc::Status::OK;
    const auto& p = local_->policy();
    std::string who = "root or the daemon's uid " + std::to_string(p.daemon_uid);
    if (!p.operator_group.empty()) who += " or in group '" + p.operator_group + "'";
    return Refuse(context, method, grpc::StatusCode::PERMISSION_DENIED,
                  "the admin socket is for operators: " + local->Describe() + " is not " + who +
                      " (security.operator_group)");
  }
  if (auto denied = CheckToken(context, method); !denied.ok()) return denied;
  return mutual_tls_ ? CheckOperatorCertificate(context, method) : grpc::Status::OK;
}

// The handshake proved the certificate chains to the CA, which signs the nodes' certificates
// too: a node's key must not open Admin (drop, persist, rebuild) on every other node.
grpc::Status Authorizer::CheckOperatorCertificate(grpc::ServerContext* context,
                                                  const char* method) const {
  auto auth = context->auth_context();
  const auto names = auth ? OperatorCertificateNames(*auth) : std::vector<std::string>{};
  if (names.empty()) {
    return Refuse(context, method, grpc::StatusCode::UNAUTHENTICATED,
                  "no verified client certificate (mutual TLS)");
  }
  for (const auto& name : names) {
    if (std::find(operator_identities_.begin(), operator_identities_.end(), name) !=
        operator_identities_.end()) {
      return grpc::Status::OK;
    }
  }
  return Refuse(context, method, grpc::StatusCode::PERMISSION_DENIED,
                "Admin over TCP is for operators: the client certificate presents " + Join(names) +
                    " (URI or DNS subject alternative names, else common name), which "
                    "security.operator_identities does not list");
}

grpc::Status Authorizer::CheckPeer(grpc::ServerContext* context, const char* method,
                                   const std::string& claimed_node_id) const {
  if (context->peer().rfind(kLocalPeerPrefix, 0) == 0) {
    return Refuse(context, method, grpc::StatusCode::PERMISSION_DENIED,
                  "Peer calls are served on the TCP endpoint only, not on the admin socket");
  }
  if (auto denied = CheckToken(context, method); !denied.ok()) return denied;
  if (!mutual_tls_) return grpc::Status::OK;
  auto auth = context->auth_context();
  const auto names = auth ? CertificateNames(*auth) : std::vector<std::string>{};
  if (names.empty()) {
    return Refuse(context, method, grpc::StatusCode::UNAUTHENTICATED,
                  "no verified client certificate (mutual TLS)");
  }
  if (std::find(names.begin(), names.end(), claimed_node_id) != names.end()) {
    return grpc::Status::OK;
  }
  return Refuse(context, method, grpc::StatusCode::PERMISSION_DENIED,
                "the caller claims node '" + claimed_node_id + "' but its certificate names " +
                    Join(names) + " (common name or DNS subject alternative name)");
}

}  // namespace reft::security
