// Every Peer RPC goes through the Authorizer: without the token (or with a wrong one) each of
// them is refused; under mutual TLS a caller whose certificate does not name the node id it
// claims is refused, and a client without a certificate does not get past the handshake.
// Real gRPC servers on loopback, real certificates made by tools/reft-certs.sh.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <fstream>
#include <functional>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "peer_fixture.h"
#include "reft/coord/gossip_control_plane.h"
#include "reft/peer/peer_node.h"
#include "reft/security/authorizer.h"
#include "reft/security/grpc_auth.h"
#include "reft/store/snapshot_store.h"
#include "reft/v1/peer.grpc.pb.h"
#include "test_support.h"

namespace reft {
namespace {

constexpr char kToken[] = "peer-token-0123456789abcdef";

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// A node's Peer service alone on 127.0.0.1:0 with the given transport and Authorizer.
struct ServedNode {
  ServedNode(const std::string& id, const std::string& dir,
             std::shared_ptr<grpc::ServerCredentials> server_creds,
             std::unique_ptr<security::Authorizer> authorizer, peer::PeerSecurity client = {},
             std::vector<std::string> seeds = {})
      : auth(std::move(authorizer)) {
    store = peer::test::OpenTestStore(dir + "/" + id);
    peer::PeerOptions o = peer::test::FastOptions(id, std::move(seeds));
    o.rpc_deadline = std::chrono::milliseconds(2000);  // a TLS handshake on a loaded machine
    client.authorizer = auth.get();
    auto created = peer::PeerNode::Create(o, store.get(), std::move(client),
                                          coord::MakeGossipControlPlane());
    REQUIRE(created.ok());
    node = std::move(*created);
    server = peer::test::ServeOnLoopback(node.get(), o, server_creds, &address);
  }
  ~ServedNode() {
    node->Stop();
    server->Shutdown(std::chrono::system_clock::now());
  }
  std::unique_ptr<security::Authorizer> auth;
  std::unique_ptr<store::SnapshotStore> store;
  std::unique_ptr<peer::PeerNode> node;
  std::unique_ptr<grpc::Server> server;
  std::string address;
};

v1::Caller Claim(const std::string& node_id) {
  v1::Caller c;
  c.set_protocol_version(peer::kProtocolVersion);
  c.set_node_id(node_id);
  c.set_epoch(1);
  c.set_address("127.0.0.1:1");
  return c;
}

// One call of each Peer RPC (the whole service), each claiming `node_id`, with `prepare`
// setting up its context; returns the status of each by method name.
std::vector<std::pair<std::string, grpc::Status>> CallEveryRpc(
    v1::Peer::Stub* stub, const std::string& node_id,
    const std::function<void(grpc::ClientContext*)>& prepare) {
  std::vector<std::pair<std::string, grpc::Status>> out;
  auto ctx = [&] {
    auto c = std::make_unique<grpc::ClientContext>();
    c->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    prepare(c.get());
    return c;
  };
  {
    v1::HelloRequest req;
    *req.mutable_caller() = Claim(node_id);
    v1::HelloResponse resp;
    out.emplace_back("Hello", stub->Hello(ctx().get(), req, &resp));
  }
  {
    v1::PingRequest req;
    *req.mutable_caller() = Claim(node_id);
    v1::PingResponse resp;
    out.emplace_back("Ping", stub->Ping(ctx().get(), req, &resp));
  }
  {
    v1::PingReqRequest req;
    *req.mutable_caller() = Claim(node_id);
    req.set_target_address("unix:/nonexistent/reft-auth-test");
    req.set_timeout_ms(10);
    v1::PingReqResponse resp;
    out.emplace_back("PingReq", stub->PingReq(ctx().get(), req, &resp));
  }
  {
    v1::ReportCompleteRequest req;
    *req.mutable_caller() = Claim(node_id);
    req.mutable_state()->set_job("victim");
    v1::ReportCompleteResponse resp;
    out.emplace_back("ReportComplete", stub->ReportComplete(ctx().get(), req, &resp));
  }
  {
    v1::ExchangeCommitStateRequest req;
    *req.mutable_caller() = Claim(node_id);
    v1::ExchangeCommitStateResponse resp;
    out.emplace_back("ExchangeCommitState", stub->ExchangeCommitState(ctx().get(), req, &resp));
  }
  {
    v1::GetManifestRequest req;
    *req.mutable_caller() = Claim(node_id);
    v1::GetManifestResponse resp;
    out.emplace_back("GetManifest", stub->GetManifest(ctx().get(), req, &resp));
  }
  {
    v1::PersistStepRequest req;
    *req.mutable_caller() = Claim(node_id);
    req.set_job("victim");
    v1::PersistStepResponse resp;
    out.emplace_back("PersistStep", stub->PersistStep(ctx().get(), req, &resp));
  }
  {
    v1::ReportStepCompletionRequest req;
    *req.mutable_caller() = Claim(node_id);
    req.set_job("victim");
    req.set_step(1);
    v1::ReportStepCompletionResponse resp;
    out.emplace_back("ReportStepCompletion", stub->ReportStepCompletion(ctx().get(), req, &resp));
  }
  {
    v1::StageLayersRequest req;
    *req.mutable_caller() = Claim(node_id);
    req.set_job("victim");
    req.set_step(1);
    req.add_layers(0);
    v1::StageLayersResponse resp;
    out.emplace_back("StageLayers", stub->StageLayers(ctx().get(), req, &resp));
  }
  {
    v1::FetchRegionRequest req;
    *req.mutable_caller() = Claim(node_id);
    req.mutable_rank()->set_job("victim");
    req.set_region("params");
    req.set_bulk(true);  // a refused call must not get a bulk ticket either
    auto c = ctx();
    auto reader = stub->FetchRegion(c.get(), req);
    v1::RegionChunk chunk;
    while (reader->Read(&chunk)) {
      CHECK(chunk.bulk_ticket().empty());
    }
    out.emplace_back("FetchRegion", reader->Finish());
  }
  return out;
}

// Every method of `service Peer` in peer.proto, so a new RPC cannot slip past this test.
std::vector<std::string> PeerMethods() {
  std::vector<std::string> names;
  const auto* service = v1::HelloRequest::descriptor()->file()->FindServiceByName("Peer");
  REQUIRE(service != nullptr);
  for (int i = 0; i < service->method_count(); ++i) names.push_back(service->method(i)->name());
  std::sort(names.begin(), names.end());
  return names;
}

std::vector<std::string> Names(const std::vector<std::pair<std::string, grpc::Status>>& calls) {
  std::vector<std::string> names;
  for (const auto& c : calls) names.push_back(c.first);
  std::sort(names.begin(), names.end());
  return names;
}

std::unique_ptr<v1::Peer::Stub> Stub(const std::string& address,
                                     std::shared_ptr<grpc::ChannelCredentials> creds) {
  return v1::Peer::NewStub(grpc::CreateChannel(address, creds));
}

// Certificates for node0, node1 and the operator in `dir` (tools/reft-certs.sh).
void MakeCertificates(const std::string& dir) {
  const std::string cmd = std::string("bash ") + REFT_CERTS_SCRIPT + " --days 1 " + dir +
                          " node0 node1 >/dev/null";
  REQUIRE(std::system(cmd.c_str()) == 0);
}

security::SecurityOptions TlsFor(const std::string& dir, const std::string& name) {
  security::SecurityOptions o;
  o.tls_ca = dir + "/ca.pem";
  o.tls_cert = dir + "/" + name + ".pem";
  o.tls_key = dir + "/" + name + ".key";
  return o;
}

TEST_CASE("every Peer RPC is refused without the shared token", "[security][peer]") {
  testing::TempDir dir("reft-peer-auth");
  ServedNode server("node0", dir.path(), grpc::InsecureServerCredentials(),
                    std::make_unique<security::Authorizer>(kToken, false));
  auto stub = Stub(server.address, grpc::InsecureChannelCredentials());

  SECTION("no token") {
    auto calls = CallEveryRpc(stub.get(), "node1", [](grpc::ClientContext*) {});
    REQUIRE(Names(calls) == PeerMethods());
    for (const auto& [method, status] : calls) {
      INFO(method << ": " << status.error_message());
      CHECK(status.error_code() == grpc::StatusCode::UNAUTHENTICATED);
      CHECK(status.error_message().find("no token") != std::string::npos);
    }
    CHECK(server.auth->refused() == calls.size());
    CHECK(server.node->bulk()->served() == 0);
  }
  SECTION("a wrong token") {
    auto calls = CallEveryRpc(stub.get(), "node1", [](grpc::ClientContext* c) {
      security::AttachToken(c, "not-the-token-but-long-enough");
    });
    for (const auto& [method, status] : calls) {
      INFO(method << ": " << status.error_message());
      CHECK(status.error_code() == grpc::StatusCode::UNAUTHENTICATED);
      CHECK(status.error_message().find("wrong token") != std::string::npos);
    }
  }
  SECTION("the right token gets past the check") {
    auto calls = CallEveryRpc(stub.get(), "node1",
                              [](grpc::ClientContext* c) { security::AttachToken(c, kToken); });
    for (const auto& [method, status] : calls) {
      INFO(method << ": " << status.error_message());
      CHECK(status.error_code() != grpc::StatusCode::UNAUTHENTICATED);
      CHECK(status.error_code() != grpc::StatusCode::PERMISSION_DENIED);
    }
    CHECK(server.auth->refused() == 0);
  }
}

TEST_CASE("nodes sharing the token form a cluster and a node with another token is kept out",
          "[security][peer]") {
  testing::TempDir dir("reft-peer-auth");
  auto plain = grpc::InsecureServerCredentials();
  ServedNode a("node0", dir.path(), plain, std::make_unique<security::Authorizer>(kToken, false),
               peer::PeerSecurity{nullptr, kToken, nullptr});
  ServedNode b("node1", dir.path(), plain, std::make_unique<security::Authorizer>(kToken, false),
               peer::PeerSecurity{nullptr, kToken, nullptr}, {a.address});
  REQUIRE(testing::Eventually([&] {
    auto m = a.node->membership().Find("node1");
    return m && m->state == peer::MemberState::kAlive;
  }));
  ServedNode rogue("node9", dir.path(), plain,
                   std::make_unique<security::Authorizer>(kToken, false),
                   peer::PeerSecurity{nullptr, "a-different-token-0123456789", nullptr},
                   {a.address});
  // The event that would have let node9 in is its Hello/Ping reaching node0's handlers: wait
  // until node0 refused some of its calls, then node9 must still be unknown there.
  const uint64_t before = a.auth->refused();
  REQUIRE(testing::Eventually([&] { return a.auth->refused() > before + 2; }));
  CHECK_FALSE(a.node->membership().Find("node9").has_value());
  CHECK_FALSE(rogue.node->membership().Find("node0").has_value());
}

TEST_CASE("under mutual TLS a Peer call must come from the node its certificate names",
          "[security][peer][tls]") {
  testing::TempDir dir("reft-peer-tls");
  MakeCertificates(dir.path() + "/certs");
  const std::string certs = dir.path() + "/certs";
  auto server_creds = security::MakeServerCredentials(TlsFor(certs, "node0"));
  REQUIRE(server_creds.ok());
  ServedNode server("node0", dir.path(), *server_creds,
                    std::make_unique<security::Authorizer>("", true));
  auto node1_creds = security::MakeChannelCredentials(TlsFor(certs, "node1"));
  REQUIRE(node1_creds.ok());
  auto stub = Stub(server.address, *node1_creds);

  SECTION("claiming another node's id is refused on every RPC") {
    auto calls = CallEveryRpc(stub.get(), "node0", [](grpc::ClientContext*) {});
    REQUIRE(Names(calls) == PeerMethods());
    for (const auto& [method, status] : calls) {
      INFO(method << ": " << status.error_message());
      CHECK(status.error_code() == grpc::StatusCode::PERMISSION_DENIED);
      CHECK(status.error_message().find("claims node 'node0'") != std::string::npos);
      CHECK(status.error_message().find("'node1'") != std::string::npos);
    }
  }
  SECTION("its own id gets past the check") {
    auto calls = CallEveryRpc(stub.get(), "node1", [](grpc::ClientContext*) {});
    for (const auto& [method, status] : calls) {
      INFO(method << ": " << status.error_message());
      CHECK(status.error_code() != grpc::StatusCode::PERMISSION_DENIED);
      CHECK(status.error_code() != grpc::StatusCode::UNAUTHENTICATED);
    }
  }
  SECTION("the operator's certificate cannot pose as a node") {
    auto op = security::MakeChannelCredentials(TlsFor(certs, "operator"));
    REQUIRE(op.ok());
    auto calls =
        CallEveryRpc(Stub(server.address, *op).get(), "node1", [](grpc::ClientContext*) {});
    for (const auto& [method, status] : calls) {
      INFO(method << ": " << status.error_message());
      CHECK(status.error_code() == grpc::StatusCode::PERMISSION_DENIED);
    }
  }
  SECTION("a client without a certificate does not get past the handshake") {
    grpc::SslCredentialsOptions ssl;
    ssl.pem_root_certs = ReadFile(certs + "/ca.pem");
    auto calls = CallEveryRpc(Stub(server.address, grpc::SslCredentials(ssl)).get(), "node1",
                              [](grpc::ClientContext*) {});
    for (const auto& [method, status] : calls) {
      INFO(method << ": " << status.error_message());
      CHECK(status.error_code() == grpc::StatusCode::UNAVAILABLE);
    }
  }
  SECTION("plain text does not get past the handshake") {
    auto calls = CallEveryRpc(Stub(server.address, grpc::InsecureChannelCredentials()).get(),
                              "node1", [](grpc::ClientContext*) {});
    for (const auto& [method, status] : calls) {
      INFO(method << ": " << status.error_message());
      CHECK(status.error_code() == grpc::StatusCode::UNAVAILABLE);
    }
  }
}

TEST_CASE("nodes with their own certificates form a cluster under mutual TLS",
          "[security][peer][tls]") {
  testing::TempDir dir("reft-peer-tls");
  const std::string certs = dir.path() + "/certs";
  MakeCertificates(certs);
  auto node = [&](const std::string& id, std::vector<std::string> seeds) {
    auto o = TlsFor(certs, id);
    peer::PeerSecurity ps;
    ps.credentials = *security::MakeChannelCredentials(o);
    return std::make_unique<ServedNode>(id, dir.path(), *security::MakeServerCredentials(o),
                                        std::make_unique<security::Authorizer>("", true), ps,
                                        std::move(seeds));
  };
  auto a = node("node0", {});
  auto b = node("node1", {a->address});
  for (auto* pair : {&a, &b}) {
    auto& self = **pair;
    const std::string other = &self == a.get() ? "node1" : "node0";
    REQUIRE(testing::Eventually([&] {
      auto m = self.node->membership().Find(other);
      return m && m->state == peer::MemberState::kAlive;
    }));
  }
  CHECK(a->auth->refused() == 0);
  CHECK(b->auth->refused() == 0);
}

}  // namespace
}  // namespace reft
