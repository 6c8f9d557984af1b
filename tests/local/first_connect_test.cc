// The refusals a new setup meets when it first connects: each names what was tried and the fix.
// Against a real LocalServer (server_fixture.h) and, for the daemon's own checks, raw hellos
// that libreft would have refused before sending.
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <catch2/catch.hpp>

#include <cstdlib>
#include <cstring>
#include <string>

#include "reft/client.h"
#include "reft/local_proto/messages.h"
#include "reft/local_proto/socket.h"
#include "server_fixture.h"

using namespace reft;
using Catch::Contains;
using reft::testing::ServerFixture;

namespace {

ClientOptions Opts(const std::string& socket, int world_dp, const std::string& protection) {
  ClientOptions o;
  o.socket_path = socket;
  o.job = "first-hour";
  o.layout.dp = world_dp;
  o.protection = protection;
  return o;
}

// Sends `hello` on a fresh connection and returns the reply frame.
local_proto::Frame RawHello(const ServerFixture& f, const local_proto::Hello& hello,
                            UniqueFd* sock) {
  auto s = local_proto::ConnectSeqpacket(f.socket);
  REQUIRE(s.ok());
  *sock = std::move(*s);
  REQUIRE(local_proto::SendFrame(sock->get(), local_proto::MessageType::kHello, 1,
                                 local_proto::Encode(hello))
              .ok());
  auto r = local_proto::RecvFrame(sock->get(), local_proto::Limits{}, 5000);
  INFO(r.status().ToString());
  REQUIRE(r.ok());
  return std::move(*r);
}

}  // namespace

TEST_CASE("a protection the layout cannot hold is refused at connect, naming the fix") {
  ServerFixture f;
  // libreft checks first: nothing reaches reftd.
  auto c = Client::Connect(Opts(f.socket, 1, "arc1"));
  REQUIRE_FALSE(c.ok());
  CHECK(c.status().code() == StatusCode::kInvalidArgument);
  CHECK_THAT(c.status().message(),
             Contains("protection 'arc1' does not fit a layout with dp=1: arc1 needs dp >= 2") &&
                 Contains("use protection='none' or a layout with dp >= 2"));
  // reftd applies the same check to a hello that skipped it; the suggestion keeps what fits.
  struct Case {
    std::string protection;
    int dp;
    std::string needs;
    std::string use;
  };
  for (const Case& k : {Case{"arc2+aec", 2, "arc2 needs dp >= 3", "use protection='arc1+aec'"},
                        Case{"aec", 1, "aec needs dp >= 2", "use protection='none'"},
                        Case{"rs3", 3, "rs3 needs dp >= 4", "use protection='rs2'"}}) {
    INFO(k.protection << " dp=" << k.dp);
    local_proto::Hello hello;
    hello.job = "raw-" + std::to_string(k.dp);
    hello.layout.dp = k.dp;
    hello.protection = k.protection;
    UniqueFd sock;
    local_proto::Frame reply = RawHello(f, hello, &sock);
    REQUIRE(reply.header.type == local_proto::MessageType::kError);
    local_proto::ErrorReply e;
    REQUIRE(local_proto::Decode(reply.payload, local_proto::Limits{}, &e).ok());
    CHECK(e.code == static_cast<uint32_t>(StatusCode::kInvalidArgument));
    CHECK_THAT(e.message, Contains(k.needs) && Contains(k.use));
  }
  for (const auto& s : f.server->Sessions()) CHECK_FALSE(s.joined);
  // The suggested protection is accepted as it is.
  local_proto::Hello fits;
  fits.job = "raw-fits";
  fits.layout.dp = 2;
  fits.protection = "arc1+aec";
  UniqueFd sock;
  CHECK(RawHello(f, fits, &sock).header.type == local_proto::MessageType::kHelloReply);
}

TEST_CASE("a client that finds no reftd names the socket it tried, where it came from, the fix") {
  ServerFixture f;
  const std::string missing = f.dir.path() + "/nobody.sock";
  auto c = Client::Connect(Opts(missing, 1, "none"));
  REQUIRE_FALSE(c.ok());
  CHECK(c.status().code() == StatusCode::kUnavailable);
  CHECK_THAT(c.status().message(),
             Contains("'" + missing + "' (given as socket=): no such socket") &&
                 Contains("systemctl start reftd") && Contains("REFT_SOCKET=<path>"));

  // The socket a stopped reftd left behind: the file is there, nobody listens.
  const std::string stale = f.dir.path() + "/stale.sock";
  int fd = ::socket(AF_UNIX, SOCK_SEQPACKET, 0);
  REQUIRE(fd >= 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strcpy(addr.sun_path, stale.c_str());
  REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0);
  ::close(fd);
  REQUIRE(::setenv("REFT_SOCKET", stale.c_str(), 1) == 0);
  c = Client::Connect(Opts("", 1, "none"));
  ::unsetenv("REFT_SOCKET");
  REQUIRE_FALSE(c.ok());
  CHECK(c.status().code() == StatusCode::kUnavailable);
  CHECK_THAT(c.status().message(),
             Contains("'" + stale + "' (from REFT_SOCKET): connection refused") &&
                 Contains("no reftd listens on it") && Contains("systemctl start reftd"));

  // A plan query goes through the same door.
  auto plan = QueryPlan(missing, "first-hour", std::chrono::seconds(5));
  CHECK_THAT(plan.status().message(), Contains("no such socket"));
}
