// The admin socket: who is an operator (root, the daemon's uid, the operator group), the peer
// credentials read from a real connection (another uid when the test runs as root), the file
// mode, and the Authorizer's verdict on calls that arrive over it.
#include <catch2/catch.hpp>

#include <grp.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <string>

#include <grpcpp/grpcpp.h>

#include "reft/security/authorizer.h"
#include "reft/security/operator_socket.h"
#include "reft/v1/peer.grpc.pb.h"
#include "test_support.h"

namespace reft::security {
namespace {

constexpr uint32_t kNobody = 65534;

TEST_CASE("operators are root, the daemon's uid and the operator group", "[security][admin]") {
  OperatorPolicy p;
  p.daemon_uid = 990;
  CHECK(IsOperator(p, 0, 0, {}));
  CHECK(IsOperator(p, 990, 5, {}));
  CHECK_FALSE(IsOperator(p, 1000, 1000, {990}));  // no operator group configured
  p.operator_gid = 4242;
  p.operator_group = "reft-ops";
  CHECK(IsOperator(p, 1000, 4242, {}));           // primary group
  CHECK(IsOperator(p, 1000, 1000, {27, 4242}));   // supplementary group
  CHECK_FALSE(IsOperator(p, 1000, 1000, {27, 990}));
}

// Connects to `path` from a child process running as `uid`/`gid`, keeps the connection open
// until the parent closes its end; returns the child's pid.
pid_t ConnectAs(const std::string& path, uint32_t uid, uint32_t gid) {
  pid_t pid = fork();
  if (pid != 0) return pid;
  // Child of a threaded process: async-signal-safe calls only.
  if (setgroups(0, nullptr) != 0 || setgid(gid) != 0 || setuid(uid) != 0) _exit(3);
  int fd = socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  for (size_t i = 0; i < path.size() && i + 1 < sizeof(addr.sun_path); ++i) {
    addr.sun_path[i] = path[i];
  }
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) _exit(4);
  char c;
  (void)!read(fd, &c, 1);
  _exit(0);
}

// An admin socket in a fresh directory whose only operator (besides root) is this process.
struct AdminSocket {
  AdminSocket() : dir("reft-opsock"), path(dir.path() + "/reftd.sock.admin") {
    policy.daemon_uid = geteuid();
    auto s = OperatorSocket::Listen(path, policy);
    REQUIRE(s.ok());
    sock = std::move(*s);
  }
  testing::TempDir dir;
  std::string path;
  OperatorPolicy policy;
  std::unique_ptr<OperatorSocket> sock;
};

TEST_CASE("the admin socket reads the connecting process's credentials", "[security][admin]") {
  AdminSocket admin;
  const testing::TempDir& dir = admin.dir;
  const std::string& path = admin.path;
  const OperatorPolicy& policy = admin.policy;
  struct stat st;
  REQUIRE(stat(path.c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0600);  // no group was named: the daemon's uid alone

  int listen_fd = socket(AF_UNIX, SOCK_STREAM, 0);  // a plain listener for IdentifyPeer
  const std::string raw = dir.path() + "/raw.sock";
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::snprintf(addr.sun_path, sizeof(addr.sun_path), "%s", raw.c_str());
  REQUIRE(bind(listen_fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0);
  REQUIRE(listen(listen_fd, 4) == 0);

  SECTION("this process: an operator") {
    int c = socket(AF_UNIX, SOCK_STREAM, 0);
    REQUIRE(connect(c, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0);
    int s = accept(listen_fd, nullptr, nullptr);
    auto peer = IdentifyPeer(s, policy);
    REQUIRE(peer.ok());
    CHECK(peer->uid == geteuid());
    CHECK(peer->pid == getpid());
    CHECK(peer->operator_);
    close(c);
    close(s);
  }
  SECTION("another uid: an operator only through the operator group") {
    if (geteuid() != 0) {
      WARN("not root: cannot connect as another uid; part not run");
      return;
    }
    REQUIRE(chmod(dir.path().c_str(), 0755) == 0);
    REQUIRE(chmod(raw.c_str(), 0666) == 0);
    pid_t child = ConnectAs(raw, kNobody, kNobody);
    int s = accept(listen_fd, nullptr, nullptr);
    REQUIRE(s >= 0);
    auto peer = IdentifyPeer(s, policy);
    REQUIRE(peer.ok());
    CHECK(peer->uid == kNobody);
    CHECK(peer->gid == kNobody);
    CHECK(peer->pid == child);
    CHECK_FALSE(peer->operator_);
    OperatorPolicy with_group = policy;
    with_group.operator_gid = kNobody;
    CHECK(IdentifyPeer(s, with_group)->operator_);
    close(s);
    int status = 0;
    REQUIRE(waitpid(child, &status, 0) == child);
    CHECK(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
  }
  close(listen_fd);
}

// A Peer service whose Hello answers with the Authorizer's Admin verdict: lets the test see
// what an Admin call over the admin socket gets, without the whole daemon.
class AdminProbe final : public v1::Peer::Service {
 public:
  explicit AdminProbe(const Authorizer* auth) : auth_(auth) {}
  grpc::Status Hello(grpc::ServerContext* ctx, const v1::HelloRequest*,
                     v1::HelloResponse*) override {
    return auth_->CheckAdmin(ctx, "Test/Admin");
  }
  grpc::Status Ping(grpc::ServerContext* ctx, const v1::PingRequest* req,
                    v1::PingResponse*) override {
    return auth_->CheckPeer(ctx, "Peer/Ping", req->caller().node_id());
  }

 private:
  const Authorizer* auth_;
};

TEST_CASE("calls over the admin socket: Admin for operators, never Peer", "[security][admin]") {
  AdminSocket admin;
  const std::string& path = admin.path;
  auto& sock = admin.sock;
  Authorizer auth("a-token-that-the-socket-does-not-need", false, sock.get());
  AdminProbe probe(&auth);
  grpc::ServerBuilder b;
  b.RegisterService(&probe);
  auto server = b.BuildAndStart();
  sock->Serve(server.get());
  auto stub = v1::Peer::NewStub(
      grpc::CreateChannel("unix:" + path, grpc::InsecureChannelCredentials()));
  auto deadline = [] {
    auto c = std::make_unique<grpc::ClientContext>();
    c->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    return c;
  };
  v1::HelloResponse hello;
  grpc::Status as_admin = stub->Hello(deadline().get(), v1::HelloRequest(), &hello);
  INFO(as_admin.error_message());
  CHECK(as_admin.ok());  // this process is the daemon's uid: an operator, no token needed
  v1::PingRequest ping;
  ping.mutable_caller()->set_node_id("node1");
  v1::PingResponse pong;
  grpc::Status peer = stub->Ping(deadline().get(), ping, &pong);
  CHECK(peer.error_code() == grpc::StatusCode::PERMISSION_DENIED);
  CHECK(peer.error_message().find("TCP endpoint only") != std::string::npos);
  sock->Stop();
  struct stat st;
  CHECK(stat(path.c_str(), &st) != 0);  // the socket file goes with the listener
  server->Shutdown(std::chrono::system_clock::now());
}

}  // namespace
}  // namespace reft::security
