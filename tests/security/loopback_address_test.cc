// What counts as loopback (docs/security.md "What reftd refuses to start with"): an IP literal
// in 127.0.0.0/8, ::1, or exactly "localhost". Without TLS and token that is the only place
// reftd starts, so a name that merely looks like loopback ("127.attacker.example.com", which
// resolves wherever its owner wants) must not count, and nothing may be resolved to decide.
#include <catch2/catch.hpp>

#include <string>

#include "reft/security/grpc_auth.h"

using reft::StatusCode;
using reft::security::HostOfAddress;
using reft::security::IsLoopbackAddress;

TEST_CASE("loopback is an IP literal in 127.0.0.0/8, ::1 or localhost, nothing else",
          "[security]") {
  for (const char* yes :
       {"127.0.0.1:7070", "127.0.0.1", "127.5.6.7:1", "127.255.255.255:65535", "[::1]:7070",
        "[::1]", "::1", "[0:0:0:0:0:0:0:1]:5", "localhost:7070", "localhost",
        "ipv4:127.0.0.1:80", "ipv6:[::1]:80", "unix:/run/reft/reftd.sock"}) {
    INFO(yes);
    CHECK(IsLoopbackAddress(yes));
  }
  for (const char* no :
       {"127.attacker.invalid:0", "127.attacker.example.com:7070", "127.0.0.1.nip.io:7070",
        "127.0.0.1.:7070", "localhost.evil:7070", "localhost.:7070", "evil-localhost:1",
        "1270.0.0.1:1", "127.1:7070", "127.0.0.1.1:1", "128.0.0.1:1", "10.0.0.1:7070",
        "0.0.0.0:7999", "[::]:7070", "[::2]:1", "[::1", "[::1]x:1", ":7070", ""}) {
    INFO(no);
    CHECK_FALSE(IsLoopbackAddress(no));
  }
}

TEST_CASE("the host of an address as reftd's config writes it", "[security]") {
  CHECK(HostOfAddress("10.0.0.1:7070") == "10.0.0.1");
  CHECK(HostOfAddress("gpu01.example.com:7070") == "gpu01.example.com");
  CHECK(HostOfAddress("[fe80::1]:7070") == "fe80::1");
  CHECK(HostOfAddress("::1") == "::1");
  CHECK(HostOfAddress("ipv4:127.0.0.1:1") == "127.0.0.1");
  CHECK(HostOfAddress("localhost") == "localhost");
  CHECK(HostOfAddress("[::1").empty());
  CHECK(HostOfAddress("[::1]x:1").empty());
}

TEST_CASE("without TLS or token a name is refused at start, naming the address",
          "[security]") {
  reft::security::SecurityOptions none;
  auto s = reft::security::ValidateSecurity(none, {"127.attacker.invalid:0"});
  CHECK(s.code() == StatusCode::kInvalidArgument);
  CHECK_THAT(s.message(), Catch::Contains("'127.attacker.invalid:0'") &&
                              Catch::Contains("not resolved"));
  CHECK(reft::security::ValidateSecurity(none, {"127.0.0.1:0", "[::1]:1", "localhost:2"}).ok());
  // An IP literal beyond loopback says nothing about names.
  auto ip = reft::security::ValidateSecurity(none, {"10.0.0.1:7070"});
  CHECK(ip.code() == StatusCode::kInvalidArgument);
  CHECK_THAT(ip.message(), !Catch::Contains("resolved"));
}
