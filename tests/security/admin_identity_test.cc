// Admin over TCP under mutual TLS is for operators (docs/security.md "One authorizer for Admin
// and Peer"): the CA signs every node's certificate too, and a node's key must not drop,
// persist or rebuild jobs on every other node. A certificate is an operator's when its URI or
// DNS subject alternative names, else its common name, include a name of
// security.operator_identities. Real gRPC over TLS on loopback, certificates made by
// tools/reft-certs.sh (and one by openssl directly, for a certificate whose names disagree).
#include <catch2/catch.hpp>

#include <chrono>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "reft/security/authorizer.h"
#include "reft/security/grpc_auth.h"
#include "reft/v1/admin.grpc.pb.h"
#include "test_support.h"

namespace reft {
namespace {

// The operator names the tests configure: reft-certs.sh's operator certificate (common name
// only) and a URI subject alternative name.
const std::vector<std::string> kOperators = {"reft-operator", "spiffe://example.org/reft/ops"};

// An Admin service whose Status answers whatever the Authorizer says, as AdminService does.
class CheckedAdmin final : public v1::Admin::Service {
 public:
  explicit CheckedAdmin(const security::Authorizer* auth) : auth_(auth) {}
  grpc::Status Status(grpc::ServerContext* ctx, const v1::StatusRequest*,
                      v1::StatusResponse*) override {
    return auth_->CheckAdmin(ctx, "Admin/Status");
  }

 private:
  const security::Authorizer* auth_;
};

// In `dir`: the CA, node0, node1, the operator certificate (CN reft-operator), "ops7" (whose
// subject alternative names include the URI above) and "mixed" (CN reft-operator, but a DNS
// subject alternative name of its own: its names are its identity, not the CN).
void MakeCertificates(const std::string& dir) {
  const std::string script = std::string("bash ") + REFT_CERTS_SCRIPT + " --days 1 " + dir;
  REQUIRE(std::system((script + " node0 node1 ops7=URI:spiffe://example.org/reft/ops "
                                ">/dev/null")
                          .c_str()) == 0);
  const std::string mixed =
      "cd " + dir + " && openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 "
      "-out mixed.key 2>/dev/null && openssl req -new -key mixed.key -subj /CN=reft-operator "
      "-out mixed.csr && printf 'extendedKeyUsage=clientAuth\\nsubjectAltName=DNS:workstation7\\n'"
      " > mixed.ext && openssl x509 -req -in mixed.csr -CA ca.pem -CAkey ca.key -CAcreateserial "
      "-days 1 -extfile mixed.ext -out mixed.pem 2>/dev/null";
  REQUIRE(std::system(mixed.c_str()) == 0);
}

security::SecurityOptions TlsFor(const std::string& dir, const std::string& name) {
  security::SecurityOptions o;
  o.tls_ca = dir + "/ca.pem";
  o.tls_cert = dir + "/" + name + ".pem";
  o.tls_key = dir + "/" + name + ".key";
  return o;
}

// node0's Admin endpoint on 127.0.0.1:0 under mutual TLS, checked by `auth`.
struct AdminServer {
  AdminServer(const std::string& certs, std::unique_ptr<security::Authorizer> a)
      : auth(std::move(a)), service(auth.get()) {
    auto creds = security::MakeServerCredentials(TlsFor(certs, "node0"));
    REQUIRE(creds.ok());
    grpc::ServerBuilder b;
    int port = 0;
    b.AddListeningPort("127.0.0.1:0", *creds, &port);
    b.RegisterService(&service);
    server = b.BuildAndStart();
    REQUIRE(server);
    address = "127.0.0.1:" + std::to_string(port);
  }
  ~AdminServer() { server->Shutdown(std::chrono::system_clock::now()); }

  // Admin/Status presenting certificate `name`.
  grpc::Status StatusAs(const std::string& certs, const std::string& name) const {
    auto creds = security::MakeChannelCredentials(TlsFor(certs, name));
    REQUIRE(creds.ok());
    auto stub = v1::Admin::NewStub(grpc::CreateChannel(address, *creds));
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    v1::StatusRequest req;
    v1::StatusResponse resp;
    return stub->Status(&ctx, req, &resp);
  }

  std::unique_ptr<security::Authorizer> auth;
  CheckedAdmin service;
  std::unique_ptr<grpc::Server> server;
  std::string address;
};

TEST_CASE("under mutual TLS Admin over TCP needs an operator's certificate",
          "[security][tls]") {
  testing::TempDir dir("reft-admin-tls");
  const std::string certs = dir.path() + "/certs";
  MakeCertificates(certs);
  AdminServer node0(certs, std::make_unique<security::Authorizer>("", true, nullptr, kOperators));

  SECTION("another node's certificate is refused, naming what it presented and the key") {
    grpc::Status s = node0.StatusAs(certs, "node1");
    INFO(s.error_message());
    CHECK(s.error_code() == grpc::StatusCode::PERMISSION_DENIED);
    CHECK_THAT(s.error_message(), Catch::Contains("'node1'") &&
                                      Catch::Contains("security.operator_identities"));
    CHECK(node0.auth->refused() == 1);
  }
  SECTION("the node's own certificate is no operator's either") {
    CHECK(node0.StatusAs(certs, "node0").error_code() == grpc::StatusCode::PERMISSION_DENIED);
  }
  SECTION("reft-certs.sh's operator certificate: its common name (it has no SAN)") {
    grpc::Status s = node0.StatusAs(certs, "operator");
    INFO(s.error_message());
    CHECK(s.ok());
  }
  SECTION("a URI subject alternative name") {
    grpc::Status s = node0.StatusAs(certs, "ops7");
    INFO(s.error_message());
    CHECK(s.ok());
  }
  SECTION("a certificate with subject alternative names is not matched by its common name") {
    grpc::Status s = node0.StatusAs(certs, "mixed");
    INFO(s.error_message());
    CHECK(s.error_code() == grpc::StatusCode::PERMISSION_DENIED);
    CHECK_THAT(s.error_message(), Catch::Contains("'workstation7'"));
  }
}

TEST_CASE("under mutual TLS with no operator identities nobody makes Admin calls over TCP",
          "[security][tls]") {
  testing::TempDir dir("reft-admin-tls");
  const std::string certs = dir.path() + "/certs";
  MakeCertificates(certs);
  AdminServer node0(certs, std::make_unique<security::Authorizer>("", true));
  CHECK(node0.StatusAs(certs, "operator").error_code() == grpc::StatusCode::PERMISSION_DENIED);
  CHECK(node0.StatusAs(certs, "node1").error_code() == grpc::StatusCode::PERMISSION_DENIED);
  // ... which is why reftd refuses to start that way.
  security::SecurityOptions o = TlsFor(certs, "node0");
  Status s = security::ValidateSecurity(o, {"127.0.0.1:7070"});
  CHECK(s.code() == StatusCode::kInvalidArgument);
  CHECK_THAT(s.message(), Catch::Contains("security.operator_identities"));
  o.operator_identities = kOperators;
  CHECK(security::ValidateSecurity(o, {"127.0.0.1:7070"}).ok());
}

}  // namespace
}  // namespace reft
